package config

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML library reports problems by line ("yaml: line 4: found unknown
// escape character"); an operator thinks in settings. fileError rewrites
// each problem to name the setting at that line, the way validation does
// ("link.topics.include (line 4): ..."), and adds the fix for the mistakes
// that come up in practice.

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// fileError rewrites a decoding error of the file at path, holding data.
// It wraps the library's error, for errors.As.
func fileError(path string, data []byte, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 1 {
		msgs := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			msgs[i] = explain(data, e)
		}
		return &decodeError{"config file " + path + ":\n  " + strings.Join(msgs, "\n  "), err}
	}
	msg := err.Error()
	if te != nil && len(te.Errors) == 1 {
		msg = te.Errors[0]
	}
	return &decodeError{"config file " + path + ": " + explain(data, msg), err}
}

type decodeError struct {
	msg string
	err error
}

func (e *decodeError) Error() string { return e.msg }
func (e *decodeError) Unwrap() error { return e.err }

// explain turns one "line N: problem" into "key (line N): problem", with
// the fix when the mistake is a known one.
func explain(data []byte, msg string) string {
	msg = strings.TrimPrefix(msg, "yaml: ")
	where, line := "", 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		msg = m[2]
		line, _ = strconv.Atoi(m[1])
		where = "line " + m[1]
		if key := keyAt(data, line); key != "" {
			where = key + " (" + where + ")"
		}
	}
	// The Go type a setting decodes into means nothing to an operator.
	if i := strings.Index(msg, " in type "); strings.HasPrefix(msg, "field ") && i > 0 {
		msg = msg[:i]
	}
	switch {
	case strings.Contains(msg, "unknown escape character"):
		msg += `: in double quotes a backslash starts an escape, so a regular expression such as "orders\..*" is refused;` +
			` write it in single quotes ('orders\..*') or double each backslash ("orders\\..*")`
	case strings.Contains(msg, "cannot start any token") && strings.HasPrefix(lineText(data, line), "\t"):
		msg += ": YAML indents with spaces, never tabs"
	}
	if where == "" {
		return msg
	}
	return where + ": " + msg
}

// lineText returns the 1-based line of data, "" when there is none.
func lineText(data []byte, line int) string {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	return lines[line-1]
}

// keyAt returns the dotted path of the setting on the 1-based line of a
// block-style YAML document (link.topics.include), "[]" standing for a list
// item (links[].name); "" when the line holds no key. It reads indentation
// only, so it works on documents the parser refused.
func keyAt(data []byte, line int) string {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	var path []string
	indent := -1 // of the innermost part found; -1 before the line itself
	for i := line - 1; i >= 0; i-- {
		text := strings.TrimRight(lines[i], " \t\r")
		body := strings.TrimLeft(text, " \t")
		if body == "" || strings.HasPrefix(body, "#") {
			continue
		}
		at := len(text) - len(body)
		if indent >= 0 && at >= indent {
			continue // a sibling or a deeper line: not a parent
		}
		item := false
		for strings.HasPrefix(body, "- ") || body == "-" {
			item = true
			body = strings.TrimLeft(strings.TrimPrefix(body, "-"), " ")
		}
		key := lineKey(body)
		switch {
		case indent < 0 && item && key != "": // "- name: a" is a key of a list item
			path = append(path, key, "[]")
		case indent < 0 && item:
			path = append(path, "[]")
		case item: // a parent list item: its own key is a sibling
			path = append(path, "[]")
		case key != "":
			path = append(path, key)
		case indent < 0:
			return "" // the line itself holds no key
		default:
			return "" // a parent that is no key: not a layout this reads
		}
		indent = at
		if at == 0 {
			break
		}
	}
	var b strings.Builder
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == "[]" {
			if i > 0 { // a trailing item is part of its list's setting
				b.WriteString("[]")
			}
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(path[i])
	}
	return b.String()
}

var keyName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// lineKey returns the key of a "key: value" or "key:" line, "" for any
// other line.
func lineKey(body string) string {
	k, _, ok := strings.Cut(body+" ", ": ")
	if !ok {
		return ""
	}
	k = strings.TrimSpace(k)
	if len(k) >= 2 && (k[0] == '"' || k[0] == '\'') && k[len(k)-1] == k[0] {
		k = k[1 : len(k)-1]
	}
	if !keyName.MatchString(k) {
		return ""
	}
	return k
}
