package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testConfig struct {
	Link struct {
		Name   string `yaml:"name"`
		Topics struct {
			Include []string `yaml:"include"`
		} `yaml:"topics"`
	} `yaml:"link"`
	Wait  time.Duration `yaml:"wait"`
	Size  ByteSize      `yaml:"size"`
	Items []struct {
		Name string `yaml:"name"`
	} `yaml:"items"`
}

// A file the loader refuses gets an error naming the setting at fault,
// as validation does, and the fix for the usual mistakes.
func TestFileErrorsNameTheSetting(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // each must appear; none means the file loads
		not  []string // none may appear
	}{
		{name: "valid", doc: "link:\n  name: a\n  topics:\n    include: ['orders\\..*']\nsize: 1MiB\n"},
		{
			name: "backslash in double quotes, flow list",
			doc:  "link:\n  name: a\n  topics:\n    include: [\"orders\\..*\"]\n",
			want: []string{"link.topics.include (line 4): found unknown escape character", "single quotes ('orders\\..*')", `("orders\\..*")`},
		},
		{
			name: "backslash in double quotes, block list",
			doc:  "link:\n  topics:\n    # the orders\n    include:\n      - \"orders\\..*\"\n",
			want: []string{"link.topics.include (line 5): found unknown escape character", "single quotes"},
		},
		{
			name: "unknown nested key",
			doc:  "link:\n  nme: a\n",
			want: []string{"link.nme (line 2): field nme not found"},
			not:  []string{"in type"},
		},
		{
			name: "unknown key in a list item",
			doc:  "items:\n  - name: a\n    nam: b\n",
			want: []string{"items[].nam (line 3): field nam not found"},
		},
		{
			name: "bad duration",
			doc:  "link: {name: a}\nwait: soon\n",
			want: []string{"wait (line 2): cannot unmarshal !!str `soon` into time.Duration"},
		},
		{
			name: "bad size",
			doc:  "size: 1XB\n",
			want: []string{`size (line 1): bad size "1XB": want bytes such as`},
		},
		{
			name: "every problem at once",
			doc:  "link:\n  nme: a\nwait: soon\n",
			want: []string{"link.nme (line 2): field nme not found", "\n  wait (line 3): cannot unmarshal"},
		},
		{
			name: "tab indentation",
			doc:  "link:\n\tname: a\n",
			want: []string{"link.name (line 2): found character that cannot start any token: YAML indents with spaces, never tabs"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tt.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var c testConfig
			err := Load(&c, path, nil, "T_", nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), "config file "+path+":") {
				t.Errorf("error does not name the file: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q\ncontains %q", err, n)
				}
			}
		})
	}
}
