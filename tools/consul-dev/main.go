// Command consul-dev is Consul 1.15.4's real agent command (MPL-2.0, served
// by the Go module proxy; Consul from 1.17 is not open source), so tests can
// start a genuine dev agent. It lives in its own module so Consul's many old
// dependencies never reach Ferry's go.mod.
package main

import (
	"os"

	"github.com/hashicorp/consul/command/agent"
	consulcli "github.com/hashicorp/consul/command/cli"
	mcli "github.com/mitchellh/cli"
)

func main() {
	ui := &consulcli.BasicUI{
		BasicUi: mcli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr},
	}
	os.Exit(agent.New(ui).Run(os.Args[1:]))
}
