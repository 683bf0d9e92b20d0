package naming

import "testing"

func TestPolicies(t *testing.T) {
	tests := []struct {
		policy, prefix, source, want string
		wantErr                      bool
	}{
		{policy: "identity", source: "orders", want: "orders"},
		{policy: "prefix", prefix: "east.", source: "orders", want: "east.orders"},
		{policy: "prefix", prefix: "", wantErr: true},
		{policy: "identity", prefix: "east.", wantErr: true},
		{policy: "prefix", prefix: "a/b", wantErr: true},
		{policy: "rename", wantErr: true},
	}
	for _, tt := range tests {
		p, err := Parse(tt.policy, tt.prefix)
		if (err != nil) != tt.wantErr {
			t.Fatalf("Parse(%q, %q) error = %v, wantErr %v", tt.policy, tt.prefix, err, tt.wantErr)
		}
		if err == nil && p.Target(tt.source) != tt.want {
			t.Errorf("Parse(%q, %q).Target(%q) = %q, want %q", tt.policy, tt.prefix, tt.source, p.Target(tt.source), tt.want)
		}
	}
}

func TestSourceInvertsTarget(t *testing.T) {
	prefix, _ := Parse("prefix", "east.")
	for _, tc := range []struct {
		p      Policy
		target string
		want   string
		ok     bool
	}{
		{Policy{}, "orders", "orders", true},
		{prefix, "east.orders", "orders", true},
		{prefix, "orders", "", false},
		{prefix, "east.", "", false},
	} {
		got, ok := tc.p.Source(tc.target)
		if got != tc.want && tc.ok || ok != tc.ok {
			t.Errorf("Source(%q) = %q, %v; want %q, %v", tc.target, got, ok, tc.want, tc.ok)
		}
		if ok && tc.p.Target(got) != tc.target {
			t.Errorf("Target(Source(%q)) = %q", tc.target, tc.p.Target(got))
		}
	}
}
