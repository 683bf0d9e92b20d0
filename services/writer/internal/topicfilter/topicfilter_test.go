package topicfilter

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name             string
		include, exclude []string
		topic            string
		want             string // "" accepted, else part of the refusal
	}{
		{"defaults accept a plain topic", DefaultInclude, DefaultExclude, "orders", ""},
		{"defaults refuse double underscore", DefaultInclude, DefaultExclude, "__ferry_checkpoints", "exclude `__.*`"},
		{"defaults refuse consumer offsets", DefaultInclude, DefaultExclude, "__consumer_offsets", "exclude `__.*`"},
		{"defaults refuse internal", DefaultInclude, DefaultExclude, "app-changelog.internal", "exclude `.*[\\-\\.]internal`"},
		{"defaults refuse replica", DefaultInclude, DefaultExclude, "east.orders.replica", "exclude `.*\\.replica`"},
		{"include is anchored at the end", []string{"orders"}, nil, "orders-secret", "no topics.include"},
		{"include is anchored at the start", []string{"orders"}, nil, "secret-orders", "no topics.include"},
		{"include matches whole name", []string{"orders|payments"}, nil, "payments", ""},
		{"exclude wins over include", []string{"orders.*"}, []string{"orders\\.pii"}, "orders.pii", "exclude `orders\\.pii`"},
		{"empty exclude admits underscores", DefaultInclude, []string{}, "__private", ""},
		{"zero filter accepts nothing", nil, nil, "orders", "no topics.include"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.include, tt.exclude)
			if err != nil {
				t.Fatal(err)
			}
			err = f.Check(tt.topic)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check(%q) = %v, want accepted", tt.topic, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Check(%q) = %v, want a refusal containing %q", tt.topic, err, tt.want)
			}
		})
	}
}

func TestParseNamesTheBadExpression(t *testing.T) {
	tests := []struct{ name, expr string }{
		{"unbalanced", "("},
		// Valid only once wrapped in the anchors, with another meaning.
		{"escapes the anchors", "a)(?:b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]string{".*"}, []string{"ok", tt.expr})
			if err == nil || !strings.Contains(err.Error(), "exclude[1]") {
				t.Fatalf("Parse = %v, want an error naming exclude[1]", err)
			}
			if CheckExpr(tt.expr) == nil {
				t.Fatalf("CheckExpr(%q) = nil, want an error", tt.expr)
			}
		})
	}
}
