// Package topicfilter is a link's allow list of source topics on the
// writer: the same include and exclude expressions, with the same meaning,
// as the fetcher's link.topics. The writer checks every topic an Open names
// against it rather than trusting the fetcher's own selection, so an
// admitted fetcher cannot write topics the writer's operator did not allow.
package topicfilter

import (
	"fmt"
	"regexp"
)

// DefaultExclude is the fetcher's default link.topics.exclude (MirrorMaker
// 2's): internal and replica topics, and anything starting with two
// underscores. Keep the two lists equal, or a fetcher with default
// settings offers topics a writer with default settings refuses.
var DefaultExclude = []string{`.*[\-\.]internal`, `.*\.replica`, `__.*`}

// DefaultInclude accepts every topic the excludes leave.
var DefaultInclude = []string{`.*`}

// Filter decides which source topics a link accepts. The zero Filter
// accepts none.
type Filter struct {
	include, exclude []pattern
}

type pattern struct {
	expr string // as configured, for messages
	re   *regexp.Regexp
}

// Parse compiles the expressions, each anchored at both ends as the
// fetcher (and MirrorMaker 2) does, so `orders` does not admit
// `orders-secret`. A bad expression is reported with its index.
func Parse(include, exclude []string) (Filter, error) {
	var f Filter
	var err error
	if f.include, err = compile("include", include); err != nil {
		return Filter{}, err
	}
	if f.exclude, err = compile("exclude", exclude); err != nil {
		return Filter{}, err
	}
	return f, nil
}

func compile(list string, exprs []string) ([]pattern, error) {
	out := make([]pattern, 0, len(exprs))
	for i, e := range exprs {
		re, err := anchored(e)
		if err != nil {
			return nil, fmt.Errorf("%s[%d] %q is not a regular expression: %w", list, i, e, err)
		}
		out = append(out, pattern{expr: e, re: re})
	}
	return out, nil
}

// CheckExpr reports whether expr is a valid expression of a topic list.
func CheckExpr(expr string) error {
	_, err := anchored(expr)
	return err
}

// anchored compiles expr to match whole names. expr must be valid on its
// own: wrapped, `a)(?:b` would compile, meaning something else.
func anchored(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile("^(?:" + expr + ")$")
}

// Check returns nil when the link accepts the topic, or else which rule
// refuses it. An exclude wins over an include.
func (f Filter) Check(topic string) error {
	for _, p := range f.exclude {
		if p.re.MatchString(topic) {
			// Not %q: doubled backslashes would misquote the expression.
			return fmt.Errorf("excluded by topics.exclude `%s`", p.expr)
		}
	}
	for _, p := range f.include {
		if p.re.MatchString(topic) {
			return nil
		}
	}
	return fmt.Errorf("matched by no topics.include expression")
}
