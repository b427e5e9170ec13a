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
// decoded into and rejects, with the field's YAML path and line, every
// scalar whose YAML type does not match the field's kind. yaml.v3 alone
// converts 2.9 into the int 2 and 1e3 into 1000 without a word; a limit or a
// window that silently loses its fraction is a different policy from the
// one the operator wrote, so integers must be written as integers.
//
// Unknown fields are left to the decoder (KnownFields), which names them.
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
		return fieldErr(path, "YAML aliases are not supported (line %d)", n.Line)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // the field keeps its zero value, as an absent one does
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return fieldErr(path, "must be a mapping (line %d)", n.Line)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := n.Content[i].Value
			f, ok := fieldByTag(t, name)
			if !ok {
				continue // the decoder reports it with its line
			}
			if err := checkScalars(n.Content[i+1], f.Type, join(path, name)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fieldErr(path, "must be a list (line %d)", n.Line)
		}
		for i, c := range n.Content {
			if err := checkScalars(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!float" && isDigits(strings.TrimLeft(n.Value, "+-")) {
			// yaml.v3 resolves an integer too large for int64 as a float.
			return fieldErr(path, "%s does not fit a 64-bit integer (line %d)", n.Value, n.Line)
		}
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return fieldErr(path, "must be an integer, got %s (line %d)", describe(n), n.Line)
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			return fieldErr(path, "%s does not fit a 64-bit integer (line %d)", n.Value, n.Line)
		}
		if t.Kind() != reflect.Int64 && (v > math.MaxInt32 || v < math.MinInt32) {
			return fieldErr(path, "%d is out of range (line %d)", v, n.Line)
		}
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

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
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

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
