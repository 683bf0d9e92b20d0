// Package config loads a service's typed configuration in layers: the
// struct's defaults, then a YAML file, then FERRY_* environment variables,
// then --set key=value flags. Every layer addresses a setting by the same
// dotted path of YAML keys (batch.max_bytes), so the configuration reference
// documents one name per setting.
//
// Unknown keys are errors in every layer: a misspelt setting must stop the
// process at start, not be silently ignored.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxFileBytes bounds a configuration file, so a wrong path (a log, a
// binary) fails fast instead of feeding the YAML parser megabytes.
const maxFileBytes = 1 << 20

// Load fills dst, which holds the defaults already, from the YAML file at
// path (none when empty), the environment entries env with the given prefix
// (FERRY_ makes FERRY_LINK_NAME set link.name), and the key=value pairs in
// sets.
func Load(dst any, path string, env []string, envPrefix string, sets []string) error {
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read config: %w", err)
		}
		if len(data) > maxFileBytes {
			return fmt.Errorf("config file %s: %d bytes, more than a configuration needs (limit %d)", path, len(data), maxFileBytes)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(dst); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file, all defaults
			return fileError(path, data, err)
		}
	}
	paths := Keys(dst)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) {
			continue
		}
		key, ok := paths[strings.TrimPrefix(name, envPrefix)]
		if !ok {
			return fmt.Errorf("environment variable %s: no such setting", name)
		}
		if err := Set(dst, key, value); err != nil {
			return fmt.Errorf("environment variable %s: %w", name, err)
		}
	}
	for _, kv := range sets {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--set %q: want key=value", kv)
		}
		if err := Set(dst, key, value); err != nil {
			return fmt.Errorf("--set %s: %w", key, err)
		}
	}
	return nil
}

// Keys maps each setting's environment name (LINK_NAME) to its dotted key
// (link.name).
func Keys(cfg any) map[string]string {
	out := map[string]string{}
	walk(reflect.TypeOf(cfg).Elem(), "", func(key string, _ reflect.Type) {
		out[strings.ToUpper(strings.NewReplacer(".", "_").Replace(key))] = key
	})
	return out
}

// List returns every dotted key of cfg with its Go type, for --help.
func List(cfg any) []string {
	var out []string
	walk(reflect.TypeOf(cfg).Elem(), "", func(key string, t reflect.Type) {
		out = append(out, key+" ("+typeName(t)+")")
	})
	return out
}

func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(time.Duration(0)):
		return "duration"
	case reflect.TypeOf(ByteSize(0)):
		return "bytes"
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
		return "list of objects, file only"
	}
	if t.Kind() == reflect.Slice {
		return "list, comma-separated"
	}
	return t.Kind().String()
}

func walk(t reflect.Type, prefix string, fn func(string, reflect.Type)) {
	for i := range t.NumField() {
		f := t.Field(i)
		if inline(f) {
			walk(f.Type, prefix, fn)
			continue
		}
		name := yamlName(f)
		if name == "" {
			continue
		}
		key := prefix + name
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			walk(f.Type, key+".", fn)
			continue
		}
		fn(key, f.Type)
	}
}

// inline reports a struct whose keys YAML takes as the outer struct's own
// (`yaml:",inline"`): a settings type shared by several sections.
func inline(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return f.Type.Kind() == reflect.Struct && slices.Contains(strings.Split(opts, ","), "inline")
}

func yamlName(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "-" || !f.IsExported() {
		return ""
	}
	if tag == "" {
		return strings.ToLower(f.Name)
	}
	return tag
}

// Set assigns the text value to the setting at the dotted key.
func Set(cfg any, key, value string) error {
	v := reflect.ValueOf(cfg).Elem()
	for _, part := range strings.Split(key, ".") {
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("no such setting %q", key)
		}
		var found bool
		if v, found = field(v, part); !found {
			return fmt.Errorf("no such setting %q", key)
		}
	}
	return setValue(v, key, value)
}

// field finds the field of struct v named name in YAML, looking into
// inlined structs as YAML does.
func field(v reflect.Value, name string) (reflect.Value, bool) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if inline(f) {
			if fv, ok := field(v.Field(i), name); ok {
				return fv, true
			}
			continue
		}
		if yamlName(f) == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func setValue(v reflect.Value, key, text string) error {
	bad := func(want string) error { return fmt.Errorf("%s: %q is not %s", key, text, want) }
	switch v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(text)
		if err != nil {
			return bad("a duration such as 30s")
		}
		v.SetInt(int64(d))
		return nil
	case ByteSize:
		b, err := ParseByteSize(text)
		if err != nil {
			return bad("a size such as 1MiB")
		}
		v.SetInt(int64(b))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return bad("true or false")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, v.Type().Bits())
		if err != nil {
			return bad("an integer")
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(text, 10, v.Type().Bits())
		if err != nil {
			return bad("a non-negative integer")
		}
		v.SetUint(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return bad("a number")
		}
		v.SetFloat(f)
	case reflect.Slice:
		var parts []string
		if text != "" {
			parts = strings.Split(text, ",")
		}
		s := reflect.MakeSlice(v.Type(), len(parts), len(parts))
		for i, p := range parts {
			if err := setValue(s.Index(i), key, strings.TrimSpace(p)); err != nil {
				return err
			}
		}
		v.Set(s)
	default:
		return fmt.Errorf("%s: cannot be set from text", key)
	}
	return nil
}

// Problems collects validation failures, each naming its key, so a service
// reports every mistake in its configuration at once.
type Problems []string

// Addf records a problem with the setting at key.
func (p *Problems) Addf(key, format string, args ...any) {
	*p = append(*p, key+": "+fmt.Sprintf(format, args...))
}

// Setting is a key and whether a configuration changes it from its default.
type Setting struct {
	Key string
	Set bool
}

// RefuseInert records each of settings that is set as a problem: a setting
// whose part is turned off by another would be accepted and then ignored,
// and a forgotten switch must not pass for a setting in force. why says
// what turns the part on.
func (p *Problems) RefuseInert(why string, settings ...Setting) {
	for _, s := range settings {
		if s.Set {
			p.Addf(s.Key, "%s", why)
		}
	}
}

// Err returns nil without problems, else one error listing them all.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration:\n  %s", strings.Join(p, "\n  "))
}
