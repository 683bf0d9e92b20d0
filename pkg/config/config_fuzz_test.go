package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzConfig has a field of every kind the loader handles.
type fuzzConfig struct {
	Name  string        `yaml:"name"`
	Count int32         `yaml:"count"`
	Big   uint64        `yaml:"big"`
	On    bool          `yaml:"on"`
	Ratio float64       `yaml:"ratio"`
	Wait  time.Duration `yaml:"wait"`
	Size  ByteSize      `yaml:"size"`
	List  []string      `yaml:"list"`
	Nums  []int         `yaml:"nums"`
	Inner struct {
		Addr string `yaml:"addr"`
	} `yaml:"inner"`
	Items []struct {
		Name string `yaml:"name"`
	} `yaml:"items"`
}

// FuzzLoad feeds arbitrary YAML, environment values and --set values to the
// loader: it must return an error or a value, never panic or hang.
func FuzzLoad(f *testing.F) {
	f.Add("name: a\ncount: 3\nwait: 1s\nsize: 1MiB\nlist: [x, y]\ninner: {addr: 'h:1'}\nitems: [{name: z}]\n", "1s", "inner.addr=q:2")
	f.Add("size: 99999999999GiB\n", "-5", "nums=1,2,x")
	f.Add("", "", "items=1")
	f.Add("count: [1]\n", "1e400", "ratio=NaN")
	f.Add("inner:\n  addr: \"a\\.b\"\nitems:\n  - nam: x\n\t- y\n", "", "")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, doc, envValue, set string) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		var c fuzzConfig
		env := []string{"F_WAIT=" + envValue, "F_SIZE=" + envValue, "F_NUMS=" + envValue}
		_ = Load(&c, path, env, "F_", []string{set})
	})
}
