package deploy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Block is one block of a Nomad job file (job, group, task, template...).
//
// Ferry reads its job files with a deliberately small subset of HCL rather
// than an HCL dependency (Nomad 1.7+ is not open source, and the job files
// only need to be checked, not run): one attribute per line (`name =
// value`, the value a string, number, bool or a one-line list), a block
// opened by `type "label"... {` at the end of a line and closed by `}` alone
// on a line, heredocs (`<<EOF`, `<<-EOF`), and `#` or `//` comments. Any
// other line is an error, so a job file written outside the subset fails
// the tests instead of being half read.
type Block struct {
	Type   string
	Labels []string
	Line   int
	Attrs  map[string]Attr
	Blocks []*Block
}

// Attr is an attribute's value as written, or a heredoc's text.
type Attr struct {
	Raw     string
	Heredoc bool
	Line    int
}

var (
	blockOpen   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*)((?:\s+"[^"]*")*)\s*\{$`)
	blockLabel  = regexp.MustCompile(`"([^"]*)"`)
	attribute   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(.+)$`)
	heredocOpen = regexp.MustCompile(`^<<(-?)([A-Za-z_][A-Za-z0-9_]*)$`)
)

// ParseHCL reads a job file in the subset described at Block into a root
// block holding its top-level blocks.
func ParseHCL(src string) (*Block, error) {
	root := &Block{Type: "(file)", Attrs: map[string]Attr{}}
	stack := []*Block{root}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(stripComment(lines[i]))
		if line == "" {
			continue
		}
		top := stack[len(stack)-1]
		if line == "}" {
			if len(stack) == 1 {
				return nil, fmt.Errorf("line %d: } closes no block", n)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		if m := blockOpen.FindStringSubmatch(line); m != nil {
			b := &Block{Type: m[1], Line: n, Attrs: map[string]Attr{}}
			for _, l := range blockLabel.FindAllStringSubmatch(m[2], -1) {
				b.Labels = append(b.Labels, l[1])
			}
			top.Blocks = append(top.Blocks, b)
			stack = append(stack, b)
			continue
		}
		m := attribute.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q is outside the HCL subset this package reads", n, line)
		}
		name, value := m[1], strings.TrimSpace(m[2])
		if _, dup := top.Attrs[name]; dup {
			return nil, fmt.Errorf("line %d: %s set twice in %s", n, name, top.Type)
		}
		if h := heredocOpen.FindStringSubmatch(value); h != nil {
			var body []string
			closed := false
			for i++; i < len(lines); i++ {
				if strings.TrimSpace(lines[i]) == h[2] {
					closed = true
					break
				}
				body = append(body, lines[i])
			}
			if !closed {
				return nil, fmt.Errorf("line %d: heredoc %s never ends", n, h[2])
			}
			if h[1] == "-" {
				body = dedent(body)
			}
			top.Attrs[name] = Attr{Raw: strings.Join(body, "\n") + "\n", Heredoc: true, Line: n}
			continue
		}
		top.Attrs[name] = Attr{Raw: value, Line: n}
	}
	if len(stack) != 1 {
		b := stack[len(stack)-1]
		return nil, fmt.Errorf("line %d: block %s never closed", b.Line, b.Type)
	}
	return root, nil
}

// stripComment drops a # or // comment outside a quoted string.
func stripComment(line string) string {
	inString, escaped := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == '#':
			return line[:i]
		case !inString && c == '/' && i+1 < len(line) && line[i+1] == '/':
			return line[:i]
		}
	}
	return line
}

// dedent removes the indentation all non-blank lines share, as HCL does
// for a <<- heredoc.
func dedent(lines []string) []string {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " \t")); indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			out[i] = l[indent:]
		} else {
			out[i] = strings.TrimLeft(l, " \t")
		}
	}
	return out
}

// Children returns the direct child blocks of a type.
func (b *Block) Children(typ string) []*Block {
	var out []*Block
	for _, c := range b.Blocks {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// Child returns the only direct child block of a type and label (label
// "" matches any).
func (b *Block) Child(typ, label string) (*Block, error) {
	var found []*Block
	for _, c := range b.Children(typ) {
		if label == "" || (len(c.Labels) > 0 && c.Labels[0] == label) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s (line %d): want one %s %q block, found %d", b.Type, b.Line, typ, label, len(found))
	}
	return found[0], nil
}

// String returns a string attribute, unquoted, or a heredoc's text.
func (b *Block) String(name string) (string, error) {
	a, ok := b.Attrs[name]
	if !ok {
		return "", fmt.Errorf("%s (line %d): no %s", b.Type, b.Line, name)
	}
	if a.Heredoc {
		return a.Raw, nil
	}
	var s string
	if err := json.Unmarshal([]byte(a.Raw), &s); err != nil {
		return "", fmt.Errorf("line %d: %s = %s: want a quoted string", a.Line, name, a.Raw)
	}
	return s, nil
}

// Int returns a number attribute.
func (b *Block) Int(name string) (int, error) {
	a, ok := b.Attrs[name]
	if !ok {
		return 0, fmt.Errorf("%s (line %d): no %s", b.Type, b.Line, name)
	}
	n, err := strconv.Atoi(a.Raw)
	if err != nil {
		return 0, fmt.Errorf("line %d: %s = %s: want a whole number", a.Line, name, a.Raw)
	}
	return n, nil
}

// Strings returns a one-line list of strings.
func (b *Block) Strings(name string) ([]string, error) {
	a, ok := b.Attrs[name]
	if !ok {
		return nil, fmt.Errorf("%s (line %d): no %s", b.Type, b.Line, name)
	}
	var s []string
	if err := json.Unmarshal([]byte(a.Raw), &s); err != nil {
		return nil, fmt.Errorf("line %d: %s = %s: want a list of strings", a.Line, name, a.Raw)
	}
	return s, nil
}
