package service

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are stamped by the build (Makefile: -ldflags -X); a
// binary built otherwise (go run, go test, go build by hand) falls back to
// what the Go toolchain recorded of the checkout.
var (
	version string
	commit  string
)

// Version is what a binary's --version prints: its name, the release it
// was built from, the commit, and the Go toolchain and platform.
func Version(name string) string {
	v, c := version, commit
	if info, ok := debug.ReadBuildInfo(); ok {
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if c == "" {
			c = settings["vcs.revision"]
			if c != "" && settings["vcs.modified"] == "true" {
				c += "-dirty"
			}
		}
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
	}
	if v == "" {
		v = "dev"
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", name, v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
