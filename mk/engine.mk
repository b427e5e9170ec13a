# Engine scale tests (10 M one-off keys, 1 M keys at default settings):
# too slow under -race, so `make test` runs them once without it.
TEST_EXTRA += engine-scale

.PHONY: engine-scale
engine-scale: testsummary
	$(call gotest,engine-scale,$(CURDIR),-count=1 -run 'TestTenMillion|TestDefaultsTrack' -v ./engine)
