package main

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkScalars walks the decoded YAML tree alongside the Go type it will be
// decoded into and rejects, with the field's YAML path and line, everything
// yaml.v3 would otherwise turn silently into a policy other than the one
// the operator wrote:
//
//   - a scalar whose YAML type does not match the field's kind (yaml.v3
//     converts 2.9 into the int 2 and 1e3 into 1000), explicitly tagged
//     ones included ("!!float 1000" for an integer);
//   - an integer that is not plain decimal: yaml.v3 reads "0100" as octal
//     64 and "0x10" as 16;
//   - an empty value ("max_requests:" is null, which would leave a rule's
//     limit unset and let it inherit the default);
//   - merge keys ("<<"), which bypass every per-field check, and aliases;
//   - unknown fields and duplicate keys, named by their path (the decoder
//     alone names a Go type or only a line).
func checkScalars(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			if err := checkScalars(c, t, path); err != nil {
				return err
			}
		}
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return fieldErr(where(path), "YAML aliases are not supported (line %d)", n.Line)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return fieldErr(where(path), "is empty (line %d): give it a value, or remove the line for the default", n.Line)
	}
	switch t.Kind() {
	case reflect.Struct:
		return checkMapping(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fieldErr(where(path), "must be a list, got %s (line %d)", describe(n), n.Line)
		}
		for i, c := range n.Content {
			if err := checkScalars(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return checkInt(n, t, path)
	case reflect.Float64:
		return checkFloat(n, path)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return fieldErr(path, "must be true or false, got %s (line %d)", describe(n), n.Line)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return fieldErr(path, "must be a string, got %s (line %d)", describe(n), n.Line)
		}
	}
	return nil
}

// checkMapping checks a mapping against struct type t: every key a known
// field, once, and no merge key.
func checkMapping(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind != yaml.MappingNode {
		return fieldErr(where(path), "must be a mapping, got %s (line %d)", describe(n), n.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode {
			return fieldErr(where(path), "a key must be a name, got %s (line %d)", describe(k), k.Line)
		}
		name := k.Value
		if k.Tag == "!!merge" || name == "<<" {
			return fieldErr(join(path, "<<"), "YAML merge keys are not supported (line %d): write the fields out", k.Line)
		}
		if prev, ok := seen[name]; ok {
			return fieldErr(join(path, name), "set twice (lines %d and %d)", prev, k.Line)
		}
		seen[name] = k.Line
		f, ok := fieldByTag(t, name)
		if !ok {
			return fieldErr(join(path, name), "unknown field (line %d); %s takes %s", k.Line, where(path), strings.Join(fieldNames(t), ", "))
		}
		if err := checkScalars(n.Content[i+1], f.Type, join(path, name)); err != nil {
			return err
		}
	}
	return nil
}

// checkInt accepts a plain decimal integer scalar that fits t.
func checkInt(n *yaml.Node, t reflect.Type, path string) error {
	explicit := n.Style&yaml.TaggedStyle != 0
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" && !explicit && isDigits(strings.TrimLeft(n.Value, "+-")) {
		// yaml.v3 resolves an integer too large for int64 as a float.
		return fieldErr(path, "%s does not fit a 64-bit integer (line %d)", n.Value, n.Line)
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return fieldErr(path, "must be an integer, got %s (line %d)", describe(n), n.Line)
	}
	digits := strings.ReplaceAll(n.Value, "_", "")
	if d := strings.TrimLeft(digits, "+-"); len(digits)-len(d) > 1 || !isDigits(d) || len(d) > 1 && d[0] == '0' {
		return fieldErr(path, "must be a decimal integer, got %q (line %d): no leading zeros, 0x or 0o (YAML would read 0100 as 64)", n.Value, n.Line)
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return fieldErr(path, "%s does not fit a 64-bit integer (line %d)", n.Value, n.Line)
	}
	if t.Kind() != reflect.Int64 && (v > math.MaxInt32 || v < math.MinInt32) {
		return fieldErr(path, "%d is out of range (line %d)", v, n.Line)
	}
	return nil
}

// checkFloat accepts a plain decimal number: an integer as checkInt takes
// it, or a finite float. yaml.v3 alone turns the string "5" into a decode
// error that names only a line, reads 0x10 as 16 and .nan or .inf as
// numbers that no percentage check downstream expects.
func checkFloat(n *yaml.Node, path string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		return checkInt(n, reflect.TypeFor[int64](), path)
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!float" {
		return fieldErr(path, "must be a number, got %s (line %d)", describe(n), n.Line)
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fieldErr(path, "must be a finite decimal number, got %q (line %d)", n.Value, n.Line)
	}
	return nil
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// where names path in a message; the root has no path of its own.
func where(path string) string {
	if path == "" {
		return "the config file's top level"
	}
	return path
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func fieldNames(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
