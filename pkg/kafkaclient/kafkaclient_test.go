package kafkaclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// saramaLog receives sarama's log for the whole run. sarama's loggers are
// process globals that its background goroutines read, so they are set
// once, before any test, and never swapped.
var saramaLog syncBuffer

func TestMain(m *testing.M) {
	sarama.Logger = log.New(&saramaLog, "", 0)
	sarama.DebugLogger = log.New(&saramaLog, "", 0)
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

const topic = "orders"

func newCluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func clientConfig(t *testing.T, brokers []string, edit func(*Config)) *sarama.Config {
	t.Helper()
	c := Defaults("ferry-test")
	c.BootstrapServers = brokers
	edit(&c)
	var p config.Problems
	c.Validate("source", &p)
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	sc, err := c.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	// Fail fast: a refused login must not be retried for half a minute.
	sc.Metadata.Retry.Max = 0
	sc.Net.DialTimeout, sc.Net.ReadTimeout = 5*time.Second, 5*time.Second
	return sc
}

// roundTrip produces one record with a sync producer and reads it back.
func roundTrip(t *testing.T, brokers []string, sc *sarama.Config) error {
	t.Helper()
	sc.Producer.Return.Successes = true
	prod, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		return err
	}
	defer prod.Close()
	value := "v-" + t.Name()
	_, offset, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(value)})
	if err != nil {
		return err
	}
	cons, err := sarama.NewConsumer(brokers, sc)
	if err != nil {
		return err
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, 0, offset)
	if err != nil {
		return err
	}
	defer pc.Close()
	select {
	case m := <-pc.Messages():
		if string(m.Value) != value {
			t.Fatalf("read %q, want %q", m.Value, value)
		}
		return nil
	case err := <-pc.Errors():
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("record not consumed")
		return nil
	}
}

// saramaLogSince returns what sarama logged since mark (saramaLog.Len()).
func saramaLogSince(mark int) string {
	return saramaLog.String()[mark:]
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSASL(t *testing.T) {
	const user, pass = "ferry-fetcher", "correct horse battery staple"
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			mark := saramaLog.Len()
			brokers := newCluster(t, kfake.EnableSASL(), kfake.Superuser(mech, user, pass))

			// The password from a file with a trailing newline, as written
			// by echo or a Secret.
			pwFile := writeFile(t, "password", []byte(pass+"\n"))
			sc := clientConfig(t, brokers, func(c *Config) {
				c.SASL = SASLConfig{Mechanism: mech, Username: user, PasswordFile: pwFile}
			})
			if err := roundTrip(t, brokers, sc); err != nil {
				t.Fatalf("produce and consume: %v", err)
			}
			// The franz-go client gets the same login from the same settings.
			if err := franzPing(t, brokers, func(c *Config) {
				c.SASL = SASLConfig{Mechanism: mech, Username: user, PasswordFile: pwFile}
			}); err != nil {
				t.Fatalf("franz-go client: %v", err)
			}
			if err := franzPing(t, brokers, func(c *Config) {
				c.SASL = SASLConfig{Mechanism: mech, Username: user, PasswordFile: writeFile(t, "wrong-franz", []byte("nope"))}
			}); err == nil {
				t.Fatal("franz-go client: wrong password accepted")
			}

			// The password from an environment variable, lower-case
			// mechanism accepted.
			t.Setenv("KAFKA_TEST_PASSWORD", pass)
			sc = clientConfig(t, brokers, func(c *Config) {
				c.SASL = SASLConfig{Mechanism: strings.ToLower(mech), Username: user, PasswordEnv: "KAFKA_TEST_PASSWORD"}
			})
			if err := roundTrip(t, brokers, sc); err != nil {
				t.Fatalf("produce and consume, password from env: %v", err)
			}

			const wrong = "wrong-password-do-not-log"
			sc = clientConfig(t, brokers, func(c *Config) {
				c.SASL = SASLConfig{Mechanism: mech, Username: user, PasswordFile: writeFile(t, "wrong", []byte(wrong))}
			})
			client, err := sarama.NewClient(brokers, sc)
			if err == nil {
				client.Close()
				t.Fatal("wrong password accepted")
			}
			// kfake drops the connection on a refused login where Kafka
			// answers SASL_AUTHENTICATION_FAILED (see
			// TestRefusedLoginErrorFromKafka), so sarama reports EOF here
			// and logs the failed SASL exchange.
			if !strings.Contains(saramaLogSince(mark), "SASL Auth") {
				t.Errorf("sarama did not log the SASL failure:\n%s", saramaLogSince(mark))
			}
			for _, secret := range []string{pass, wrong} {
				if strings.Contains(err.Error(), secret) || strings.Contains(saramaLogSince(mark), secret) {
					t.Errorf("a password appears in the error or sarama's log:\n%v\n%s", err, saramaLogSince(mark))
				}
			}
		})
	}
}

// TestRefusedLoginErrorFromKafka shows the error a refused login gives
// against a broker that answers as Apache Kafka does.
func TestRefusedLoginErrorFromKafka(t *testing.T) {
	const pass = "wrong-password-do-not-log"
	mark := saramaLog.Len()
	mb := sarama.NewMockBroker(t, 1)
	defer mb.Close()
	mb.SetHandlerByMap(map[string]sarama.MockResponse{
		"ApiVersionsRequest": sarama.NewMockApiVersionsResponse(t).SetApiKeys([]sarama.ApiVersionsResponseKey{
			{ApiKey: 3, MaxVersion: 7}, {ApiKey: 17, MaxVersion: 1}, {ApiKey: 18, MaxVersion: 3}, {ApiKey: 36, MaxVersion: 1},
		}),
		"SaslHandshakeRequest":    sarama.NewMockSaslHandshakeResponse(t).SetEnabledMechanisms([]string{"PLAIN"}),
		"SaslAuthenticateRequest": sarama.NewMockSaslAuthenticateResponse(t).SetError(sarama.ErrSASLAuthenticationFailed),
	})
	brokers := []string{mb.Addr()}
	sc := clientConfig(t, brokers, func(c *Config) {
		c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "ferry", PasswordFile: writeFile(t, "pw", []byte(pass))}
	})
	client, err := sarama.NewClient(brokers, sc)
	if err == nil {
		client.Close()
		t.Fatal("refused login accepted")
	}
	if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) || !strings.Contains(err.Error(), "SASL Authentication failed") {
		t.Errorf("error %q, want SASL Authentication failed\n%s", err, saramaLogSince(mark))
	}
	if Unreachable(err) {
		t.Errorf("a refused login is Unreachable (worth waiting for): %v", err)
	}
	if strings.Contains(err.Error(), pass) || strings.Contains(saramaLogSince(mark), pass) {
		t.Errorf("the password appears in the error or sarama's log:\n%v\n%s", err, saramaLogSince(mark))
	}
}

// tlsCluster starts kfake behind TLS with a certificate for 127.0.0.1
// from a fresh CA; clientCAs, if set, makes client certificates mandatory.
func tlsCluster(t *testing.T, clientCAs *x509.CertPool, opts ...kfake.Opt) (brokers []string, ca *devcerts.CA, caFile string) {
	t.Helper()
	now := time.Now()
	ca, err := devcerts.NewCA("kafka test CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(devcerts.LeafOptions{
		DNSNames: []string{"kafka.test"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	sc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCAs != nil {
		sc.ClientAuth, sc.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
	}
	brokers = newCluster(t, append([]kfake.Opt{kfake.TLS(sc)}, opts...)...)
	return brokers, ca, writeFile(t, "kafka-ca.pem", ca.CertPEM)
}

func TestTLS(t *testing.T) {
	brokers, _, caFile := tlsCluster(t, nil)

	t.Run("verified", func(t *testing.T) {
		sc := clientConfig(t, brokers, func(c *Config) { c.TLS = TLSConfig{Enabled: true, CAFile: caFile} })
		if err := roundTrip(t, brokers, sc); err != nil {
			t.Fatalf("produce and consume over TLS: %v", err)
		}
	})
	t.Run("server name", func(t *testing.T) {
		sc := clientConfig(t, brokers, func(c *Config) {
			c.TLS = TLSConfig{Enabled: true, CAFile: caFile, ServerName: "kafka.test"}
		})
		if err := roundTrip(t, brokers, sc); err != nil {
			t.Fatalf("produce and consume with server_name: %v", err)
		}
	})
	t.Run("wrong server name", func(t *testing.T) {
		sc := clientConfig(t, brokers, func(c *Config) {
			c.TLS = TLSConfig{Enabled: true, CAFile: caFile, ServerName: "other.test"}
		})
		_, err := sarama.NewClient(brokers, sc)
		if err == nil {
			t.Fatal("connected to a broker whose certificate names another host")
		}
		if Unreachable(err) {
			t.Errorf("a certificate for another host is Unreachable (worth waiting for): %v", err)
		}
	})
	t.Run("unknown CA", func(t *testing.T) {
		other, err := devcerts.NewCA("other", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		sc := clientConfig(t, brokers, func(c *Config) {
			c.TLS = TLSConfig{Enabled: true, CAFile: writeFile(t, "other.pem", other.CertPEM)}
		})
		client, err := sarama.NewClient(brokers, sc)
		if err == nil {
			client.Close()
			t.Fatal("connected to a broker from an untrusted CA")
		}
		if Unreachable(err) {
			t.Errorf("an untrusted CA is Unreachable (worth waiting for): %v", err)
		}
	})
	t.Run("plaintext client", func(t *testing.T) {
		sc := clientConfig(t, brokers, func(*Config) {})
		sc.Net.ReadTimeout = time.Second
		client, err := sarama.NewClient(brokers, sc)
		if err == nil {
			client.Close()
			t.Fatal("plaintext client talked to a TLS broker")
		}
		// The failure alone looks like a broker restarting (a dropped
		// connection), which a start waits out for ever; explained, it
		// names the setting and is a refusal.
		cfg := Config{BootstrapServers: brokers}
		explained := cfg.Explain(context.Background(), "source.tls", err)
		var listener *TLSListenerError
		if !errors.As(explained, &listener) || !strings.Contains(explained.Error(), "source.tls.enabled is false") {
			t.Fatalf("Explain(%v) = %v, want a TLSListenerError naming source.tls", err, explained)
		}
		if Unreachable(explained) {
			t.Errorf("a plaintext client at a TLS broker is Unreachable (worth waiting for): %v", explained)
		}
		// franz-go's view of the same mistake.
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = cl.Ping(ctx)
		if err == nil {
			t.Fatal("plaintext franz-go client talked to a TLS broker")
		}
		if explained := cfg.Explain(ctx, "target.tls", err); !errors.As(explained, &listener) {
			t.Fatalf("Explain(%v) = %v, want a TLSListenerError", err, explained)
		}
	})
}

// A dropped connection at a plaintext listener (a broker restarting) stays
// what it was: worth waiting for.
func TestExplainLeavesPlaintextDropsAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close() // drops every connection, TLS handshake or not
		}
	}()
	cfg := Config{BootstrapServers: []string{ln.Addr().String()}}
	if err := cfg.Explain(context.Background(), "source.tls", io.EOF); err != io.EOF || !Unreachable(err) {
		t.Fatalf("Explain(EOF) = %v, want EOF, Unreachable", err)
	}
	// With TLS on, a drop is never taken for a missing setting.
	cfg.TLS.Enabled = true
	if err := cfg.Explain(context.Background(), "source.tls", io.EOF); err != io.EOF {
		t.Fatalf("Explain with TLS on = %v, want EOF", err)
	}
}

func TestMutualTLSAndSCRAM(t *testing.T) {
	now := time.Now()
	clientCA, err := devcerts.NewCA("client CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.Cert)
	const user, pass = "ferry-writer", "s3cret-512"
	brokers, _, caFile := tlsCluster(t, pool, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", user, pass))
	leaf, err := clientCA.Issue(devcerts.LeafOptions{
		URIs: []string{"spiffe://ferry.local/ferry/writer"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := writeFile(t, "client.pem", leaf.CertPEM), writeFile(t, "client-key.pem", leaf.KeyPEM)
	t.Setenv("KAFKA_TARGET_PASSWORD", pass)
	sasl := SASLConfig{Mechanism: "SCRAM-SHA-512", Username: user, PasswordEnv: "KAFKA_TARGET_PASSWORD"}

	sc := clientConfig(t, brokers, func(c *Config) {
		c.TLS = TLSConfig{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
		c.SASL = sasl
	})
	if err := roundTrip(t, brokers, sc); err != nil {
		t.Fatalf("produce and consume with mTLS and SCRAM: %v", err)
	}
	if err := franzPing(t, brokers, func(c *Config) {
		c.TLS = TLSConfig{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}
		c.SASL = sasl
	}); err != nil {
		t.Fatalf("franz-go client with mTLS and SCRAM: %v", err)
	}
	err = franzPing(t, brokers, func(c *Config) {
		c.TLS = TLSConfig{Enabled: true, CAFile: caFile}
		c.SASL = sasl
	})
	if err == nil {
		t.Fatal("franz-go client without certificate admitted by a broker requiring one")
	}
	// The broker's refusal arrives as a TLS alert: not worth waiting for.
	if Unreachable(err) {
		t.Errorf("franz-go: a broker's refusal of no certificate is Unreachable (worth waiting for): %v", err)
	}
	sc = clientConfig(t, brokers, func(c *Config) {
		c.TLS = TLSConfig{Enabled: true, CAFile: caFile}
		c.SASL = sasl
	})
	client, err := sarama.NewClient(brokers, sc)
	if err == nil {
		client.Close()
		t.Fatal("client without certificate admitted by a broker requiring one")
	}
	if Unreachable(err) {
		t.Errorf("sarama: a broker's refusal of no certificate is Unreachable (worth waiting for): %v", err)
	}
}

func TestValidate(t *testing.T) {
	ca, err := devcerts.NewCA("ca", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(devcerts.LeafOptions{DNSNames: []string{"x"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	caFile := writeFile(t, "ca.pem", ca.CertPEM)
	certFile, keyFile := writeFile(t, "c.pem", leaf.CertPEM), writeFile(t, "k.pem", leaf.KeyPEM)
	pwFile := writeFile(t, "pw", []byte("hunter2\n"))
	emptyPw := writeFile(t, "empty", []byte("\n"))
	t.Setenv("KAFKA_PW", "hunter2")
	t.Setenv("KAFKA_EMPTY", "")

	remote := []string{"kafka-east:9092"}
	cases := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"tls full", func(c *Config) {
			c.TLS = TLSConfig{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "kafka"}
		}, nil},
		{"tls system roots", func(c *Config) { c.TLS = TLSConfig{Enabled: true} }, nil},
		{"tls off with files", func(c *Config) { c.TLS = TLSConfig{CAFile: caFile} }, []string{"source.tls.enabled: "}},
		{"cert without key", func(c *Config) { c.TLS = TLSConfig{Enabled: true, CertFile: certFile} }, []string{"source.tls.key_file: required"}},
		{"key without cert", func(c *Config) { c.TLS = TLSConfig{Enabled: true, KeyFile: keyFile} }, []string{"source.tls.cert_file: required"}},
		{"missing files", func(c *Config) {
			c.TLS = TLSConfig{Enabled: true, CAFile: "/nonexistent/ca.pem", CertFile: "/nonexistent/c.pem", KeyFile: keyFile}
		}, []string{"source.tls.cert_file: load cert /nonexistent/c.pem", "source.tls.ca_file: read CA bundle: open /nonexistent/ca.pem"}},
		{"key mismatch", func(c *Config) {
			c.TLS = TLSConfig{Enabled: true, CertFile: certFile, KeyFile: writeFile(t, "k2.pem", ca.KeyPEM)}
		}, []string{"source.tls.cert_file: load cert"}},
		{"bad CA", func(c *Config) { c.TLS = TLSConfig{Enabled: true, CAFile: keyFile} }, []string{"source.tls.ca_file: CA bundle"}},
		{"scram file", func(c *Config) { c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: pwFile} }, nil},
		{"scram env", func(c *Config) {
			c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "u", PasswordEnv: "KAFKA_PW"}
		}, nil},
		{"sasl without mechanism", func(c *Config) { c.SASL = SASLConfig{Username: "u"} }, []string{"source.sasl.mechanism: "}},
		{"unknown mechanism", func(c *Config) { c.SASL = SASLConfig{Mechanism: "GSSAPI", Username: "u", PasswordFile: pwFile} }, []string{"source.sasl.mechanism: \"GSSAPI\""}},
		{"no username no password", func(c *Config) { c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512"} }, []string{
			"source.sasl.username: required", "source.sasl.password_file: required"}},
		{"both passwords", func(c *Config) {
			c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: pwFile, PasswordEnv: "KAFKA_PW"}
		}, []string{"source.sasl.password_env: set password_file or password_env, not both"}},
		{"unset env", func(c *Config) {
			c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordEnv: "KAFKA_EMPTY"}
		}, []string{
			"source.sasl.password_env: environment variable KAFKA_EMPTY is not set or empty"}},
		{"FERRY_ env", func(c *Config) {
			c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordEnv: "FERRY_FETCHER_SOURCE_PASSWORD"}
		}, []string{"source.sasl.password_env: FERRY_FETCHER_SOURCE_PASSWORD: FERRY_ variables are settings"}},
		{"empty file", func(c *Config) { c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: emptyPw} }, []string{
			"source.sasl.password_file: password file " + emptyPw + " is empty"}},
		{"missing file", func(c *Config) {
			c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: "/nonexistent/pw"}
		}, []string{"source.sasl.password_file: read password: open /nonexistent/pw"}},
		{"plain without tls", func(c *Config) {
			c.BootstrapServers = remote
			c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "u", PasswordFile: pwFile}
		}, []string{"source.sasl.mechanism: PLAIN sends the password in clear"}},
		{"plain with unverified tls", func(c *Config) {
			c.BootstrapServers = remote
			c.TLS = TLSConfig{Enabled: true, InsecureSkipVerify: true}
			c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "u", PasswordFile: pwFile}
		}, []string{"source.sasl.mechanism: PLAIN sends the password in clear"}},
		{"plain with tls", func(c *Config) {
			c.BootstrapServers = remote
			c.TLS = TLSConfig{Enabled: true}
			c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "u", PasswordFile: pwFile}
		}, nil},
		{"plain on loopback", func(c *Config) { c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "u", PasswordFile: pwFile} }, nil},
		{"existing checks", func(c *Config) { c.BootstrapServers, c.Version, c.DialTimeout = nil, "x", 0 }, []string{
			"source.bootstrap_servers: required", "source.version: ", "source.dial_timeout: must be positive"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults("ferry-test")
			c.BootstrapServers = []string{"127.0.0.1:9092"}
			tc.edit(&c)
			var p config.Problems
			c.Validate("source", &p)
			if len(p) != len(tc.want) {
				t.Fatalf("problems %q, want %q", p, tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(p[i], w) {
					t.Errorf("problem %q, want prefix %q", p[i], w)
				}
			}
			if strings.Contains(strings.Join(p, "\n"), "hunter2") {
				t.Errorf("a password appears in the problems: %q", p)
			}
		})
	}
}

func TestSaramaSettings(t *testing.T) {
	t.Setenv("KAFKA_PW", "hunter2")
	c := Defaults("ferry-writer")
	c.BootstrapServers = []string{"k:9092"}
	c.TLS = TLSConfig{Enabled: true, ServerName: "kafka.internal"}
	c.SASL = SASLConfig{Mechanism: "scram-sha-512", Username: "ferry", PasswordEnv: "KAFKA_PW"}
	sc, err := c.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Net.TLS.Enable || sc.Net.TLS.Config.ServerName != "kafka.internal" || sc.Net.TLS.Config.InsecureSkipVerify ||
		sc.Net.TLS.Config.MinVersion != tls.VersionTLS12 || sc.Net.TLS.Config.RootCAs != nil {
		t.Errorf("tls %+v", sc.Net.TLS)
	}
	if !sc.Net.SASL.Enable || sc.Net.SASL.Mechanism != sarama.SASLTypeSCRAMSHA512 || sc.Net.SASL.User != "ferry" ||
		sc.Net.SASL.Password != "hunter2" || sc.Net.SASL.SCRAMClientGeneratorFunc == nil {
		t.Errorf("sasl mechanism %q user %q", sc.Net.SASL.Mechanism, sc.Net.SASL.User)
	}
	if err := sc.Validate(); err != nil {
		t.Errorf("sarama refuses the configuration: %v", err)
	}

	// A missing password fails Sarama without quoting anything secret.
	c.SASL.PasswordEnv = "KAFKA_UNSET_FOR_TEST"
	if _, err := c.Sarama(); err == nil || !strings.Contains(err.Error(), "KAFKA_UNSET_FOR_TEST") {
		t.Errorf("missing password: %v", err)
	}

	plain := Defaults("ferry-fetcher")
	sc, err = plain.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	if sc.Net.TLS.Enable || sc.Net.SASL.Enable {
		t.Error("TLS or SASL on by default")
	}
}

// franzPing asks the cluster for its metadata with a franz-go client built
// by Config.Franz.
func franzPing(t *testing.T, brokers []string, edit func(*Config)) error {
	t.Helper()
	c := Defaults("ferry-test")
	c.BootstrapServers = brokers
	edit(&c)
	opts, err := c.Franz()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}

// TestUnreachable: a cluster nobody listens for, from either library, is
// worth waiting for; Kafka's retriable codes are, its refusals are not,
// whichever library carries them.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := []string{ln.Addr().String()}
	ln.Close()
	sc := clientConfig(t, closed, func(*Config) {})
	sc.Metadata.Retry.Max = 0
	if _, err := sarama.NewClient(closed, sc); !Unreachable(err) {
		t.Errorf("sarama, nothing listening: Unreachable false for %v", err)
	}
	if err := franzPing(t, closed, func(*Config) {}); !Unreachable(err) {
		t.Errorf("franz-go, nothing listening: Unreachable false for %v", err)
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("some other failure"), false},
		{sarama.ErrLeaderNotAvailable, true},
		{fmt.Errorf("checkpoint topic: %w", sarama.ErrNotController), true},
		{sarama.Wrap(sarama.ErrOutOfBrokers, io.EOF), true},
		{sarama.Wrap(sarama.ErrOutOfBrokers, sarama.ErrSASLAuthenticationFailed), false},
		{sarama.ErrTopicAuthorizationFailed, false},
		{sarama.ConfigurationError("bad"), false},
		{kerr.NotLeaderForPartition, true},
		{fmt.Errorf("producer id topic: %w", kerr.CoordinatorLoadInProgress), true},
		{kerr.ClusterAuthorizationFailed, false},
		{kerr.InvalidReplicationFactor, false},
		{syscall.ECONNREFUSED, true},
		{context.DeadlineExceeded, true},
	} {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("Unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
