// Command ferry-certs writes a development CA and fetcher and writer
// certificates (ECDSA P-256, SPIFFE IDs spiffe://<trust-domain>/ferry/fetcher
// and .../writer, DNS localhost, IPs 127.0.0.1 and ::1) into a folder, for
// running Ferry with mutual TLS on one machine. Never for production: the CA
// key sits next to the certificates.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

func main() {
	out := flag.String("out", "certs", "folder to write ca.pem, fetcher.pem, writer.pem and their keys into")
	validity := flag.Duration("validity", 30*24*time.Hour, "validity of every certificate")
	domain := flag.String("trust-domain", devcerts.DefaultTrustDomain, "SPIFFE trust domain")
	overwrite := flag.Bool("overwrite", false, "replace existing files (a new CA: peers with old files stop trusting these)")
	flag.Parse()

	files, err := devcerts.WriteDir(*out, devcerts.Options{TrustDomain: *domain, Validity: *validity, Overwrite: *overwrite})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-certs:", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(f)
	}
}
