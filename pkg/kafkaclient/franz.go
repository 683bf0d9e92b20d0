package kafkaclient

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Franz returns franz-go client options with the same settings as Sarama:
// the brokers, client id, dial timeout, TLS and SASL. Callers add their own
// options (version caps, timeouts). Like Sarama, it reads the TLS files and
// the SASL password now.
func (c Config) Franz() ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.BootstrapServers...),
		kgo.ClientID(c.ClientID),
		kgo.DialTimeout(c.DialTimeout),
	}
	if c.TLS.Enabled {
		tc, err := c.TLS.build()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.SASL.Mechanism != "" {
		m, err := c.SASL.franz()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (c SASLConfig) franz() (sasl.Mechanism, error) {
	pw, err := c.password()
	if err != nil {
		return nil, fmt.Errorf("sasl: %w", err)
	}
	switch m := c.mechanism(); m {
	case "PLAIN":
		return plain.Auth{User: c.Username, Pass: pw}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: c.Username, Pass: pw}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: c.Username, Pass: pw}.AsSha512Mechanism(), nil
	default:
		return nil, fmt.Errorf("sasl mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Mechanism)
	}
}
