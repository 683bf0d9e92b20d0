// Package kafkaclient holds the settings both tiers use to reach a Kafka
// cluster, and turns them into a sarama configuration.
package kafkaclient

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/config"
)

// Config is how to reach one Kafka cluster.
type Config struct {
	// BootstrapServers lists host:port addresses of the cluster's brokers.
	BootstrapServers []string `yaml:"bootstrap_servers"`
	// ClientID names this client in the brokers' logs and quotas.
	ClientID string `yaml:"client_id"`
	// Version is the Kafka protocol version sarama speaks. Kafka 4 refuses
	// request versions older than 2.1, so the default is recent.
	Version string `yaml:"version"`
	// DialTimeout bounds connecting to a broker.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// TLS encrypts and authenticates the connections to the brokers.
	TLS TLSConfig `yaml:"tls"`
	// SASL authenticates this client to the brokers.
	SASL SASLConfig `yaml:"sasl"`
}

// Defaults returns the settings used when a file leaves them out.
func Defaults(clientID string) Config {
	return Config{ClientID: clientID, Version: "3.6.0", DialTimeout: 10 * time.Second}
}

// Validate records every problem under the given key prefix (source, target).
func (c Config) Validate(prefix string, p *config.Problems) {
	if len(c.BootstrapServers) == 0 {
		p.Addf(prefix+".bootstrap_servers", "required: list the cluster's brokers as host:port")
	}
	for _, s := range c.BootstrapServers {
		if s == "" {
			p.Addf(prefix+".bootstrap_servers", "empty address")
		}
	}
	if _, err := sarama.ParseKafkaVersion(c.Version); err != nil {
		p.Addf(prefix+".version", "%q is not a Kafka version such as 3.6.0", c.Version)
	}
	if c.DialTimeout <= 0 {
		p.Addf(prefix+".dial_timeout", "must be positive")
	}
	c.TLS.validate(prefix+".tls", p)
	c.SASL.validate(prefix+".sasl", c.TLS, c.BootstrapServers, p)
}

// Sarama returns a sarama configuration with these settings; callers add
// their producer or consumer settings. It reads the TLS files and the SASL
// password now: a change on disk takes effect at the next start.
func (c Config) Sarama() (*sarama.Config, error) {
	v, err := sarama.ParseKafkaVersion(c.Version)
	if err != nil {
		return nil, fmt.Errorf("kafka version: %w", err)
	}
	sc := sarama.NewConfig()
	sc.Version = v
	sc.ClientID = c.ClientID
	sc.Net.DialTimeout = c.DialTimeout
	// Kafka's metadata refresh default of 10 minutes is far too slow to see
	// new partitions; discovery refreshes explicitly anyway.
	sc.Metadata.RefreshFrequency = time.Minute
	if c.TLS.Enabled {
		tc, err := c.TLS.build()
		if err != nil {
			return nil, err
		}
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = tc
	}
	if err := c.SASL.apply(sc); err != nil {
		return nil, err
	}
	return sc, nil
}
