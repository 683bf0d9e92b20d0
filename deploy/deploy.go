// Package deploy holds Ferry's deployment manifests, Kubernetes
// (kubernetes/: kustomize bases and an overlay per region, rendered with
// kustomize's Go API and decoded strictly into the Kubernetes API types)
// and Nomad (nomad/), and reads them back so tests can hold
// them to the services they deploy: each service's config tests load the
// Ferry configuration a manifest embeds through that service's own loader
// and validation, then call Check with what the configuration says (ports,
// drain time, certificate files), so a manifest cannot drift from the
// settings the binaries accept or from the ports they listen on.
//
// Nothing here talks to a cluster; the manifests are embedded at build
// time.
package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

//go:embed kubernetes nomad
var files embed.FS

// Files lists the manifest files under dir (kubernetes or nomad), their
// names relative to deploy/.
func Files(dir string) ([]string, error) {
	var out []string
	err := fs.WalkDir(files, dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, path)
		}
		return err
	})
	return out, err
}

// Read returns a manifest file's text.
func Read(name string) (string, error) {
	b, err := files.ReadFile(name)
	return string(b), err
}

// Manifest is one tier's deployment in one manifest file.
type Manifest interface {
	// Config returns the text of the Ferry configuration file the manifest
	// passes to the service with --config.
	Config() (string, error)
	// Env returns the FERRY_<SVC>_ settings the manifest sets in the
	// environment, as NAME=value, with values the platform fills in at run
	// time (the pod name, the allocation id, the node's address) replaced
	// by plausible samples.
	Env(prefix string) ([]string, error)
	// Check returns every disagreement between the manifest and facts
	// about the configuration it embeds.
	Check(f Facts) []error
}

// Facts are what a service's loaded configuration says that the
// manifest around it must agree with.
type Facts struct {
	// Tier is fetcher or writer.
	Tier string
	// AdminListen is admin.listen: probes, checks and scraping go there.
	AdminListen string
	// GRPCListen is the writer's listen; empty for the fetcher.
	GRPCListen string
	// ShutdownTimeout is the drain the platform must wait for at stop.
	ShutdownTimeout time.Duration
	// TLSFiles are the mTLS certificate, key and CA bundle paths.
	TLSFiles []string
	// SecretFiles hold credentials (the Consul ACL token files): each must
	// come from the platform's secret store, never from the image or the
	// configuration.
	SecretFiles []string
	// Replicable is true when several instances with this configuration
	// may run at once: always for writers; for fetchers only with Consul
	// leases, since without them each fetcher owns every shard.
	Replicable bool
	// SelfRegisters is true when the writer registers itself in Consul
	// (registration.address).
	SelfRegisters bool
	// Shards bounds the useful instances (0: no bound): each shard has
	// one owner at a time, so fetchers past the link's shards, or writers
	// past the shards of all links, idle.
	Shards int
	// Link is the fetcher's link.name, empty for the writer: the lag the
	// fetchers scale on is that link's.
	Link string
}

// ImageName is the placeholder image of a tier; images are not published
// by this repository.
func ImageName(tier string) string {
	return "ghcr.io/ferry-replicator/ferry-" + tier + ":VERSION"
}

// drainMargin is what the platform's stop timeout must leave beyond the
// configured drain: closing the Kafka and Consul clients, releasing leases.
const drainMargin = 10 * time.Second

// listenPort returns an address's port, refusing a loopback host, which
// nothing outside the container or pod could reach.
func listenPort(key, addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %v", key, addr, err)
	}
	if host != "" && tlsconfig.IsLoopback(addr) {
		return 0, fmt.Errorf("%s %q is loopback: probes, checks and peers outside the container cannot reach it", key, addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return 0, fmt.Errorf("%s %q: port is not a number", key, addr)
	}
	return n, nil
}

// configArg returns the value of --config in a container's arguments.
func configArg(args []string) (string, error) {
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			return args[i+1], nil
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("arguments %q have no --config FILE", args)
}
