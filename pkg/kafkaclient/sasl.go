package kafkaclient

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// SASLConfig authenticates the client with a user name and password. The
// password itself is never a setting, so it cannot end up in a YAML file, a
// --set flag, a shell history or --print-config: it is read from a file (a
// mounted Kubernetes Secret) or from an environment variable named here.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty turns SASL
	// off.
	Mechanism string `yaml:"mechanism"`
	// Username is the Kafka principal's name.
	Username string `yaml:"username"`
	// PasswordFile holds the password; one trailing newline is ignored.
	PasswordFile string `yaml:"password_file"`
	// PasswordEnv names the environment variable holding the password. It
	// must not start with FERRY_: those variables are settings, and an
	// unknown one stops the process.
	PasswordEnv string `yaml:"password_env"`
}

func (c SASLConfig) mechanism() sarama.SASLMechanism {
	return sarama.SASLMechanism(strings.ToUpper(c.Mechanism))
}

func (c SASLConfig) validate(prefix string, tc TLSConfig, brokers []string, p *config.Problems) {
	if c.Mechanism == "" {
		if c.Username != "" || c.PasswordFile != "" || c.PasswordEnv != "" {
			p.Addf(prefix+".mechanism", "SASL settings are set but no mechanism: choose PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		return
	}
	switch c.mechanism() {
	case sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
	case sarama.SASLTypePlaintext:
		// PLAIN sends the password as is: only over verified TLS, or to a
		// broker on this machine.
		if (!tc.Enabled || tc.InsecureSkipVerify) && !allLoopback(brokers) {
			p.Addf(prefix+".mechanism", "PLAIN sends the password in clear: it needs tls.enabled without insecure_skip_verify (or use SCRAM-SHA-512)")
		}
	default:
		p.Addf(prefix+".mechanism", "%q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Mechanism)
	}
	if c.Username == "" {
		p.Addf(prefix+".username", "required with a SASL mechanism")
	}
	switch {
	case c.PasswordFile == "" && c.PasswordEnv == "":
		p.Addf(prefix+".password_file", "required with a SASL mechanism (or password_env)")
	case c.PasswordFile != "" && c.PasswordEnv != "":
		p.Addf(prefix+".password_env", "set password_file or password_env, not both")
	case strings.HasPrefix(strings.ToUpper(c.PasswordEnv), "FERRY_"):
		p.Addf(prefix+".password_env", "%s: FERRY_ variables are settings; name the variable otherwise, such as KAFKA_SOURCE_PASSWORD", c.PasswordEnv)
	default:
		if _, err := c.password(); err != nil {
			key := ".password_file"
			if c.PasswordEnv != "" {
				key = ".password_env"
			}
			p.Addf(prefix+key, "%v", err)
		}
	}
}

// password reads the password. Its errors name the file or variable, never
// the content.
func (c SASLConfig) password() (string, error) {
	if c.PasswordEnv != "" {
		pw := os.Getenv(c.PasswordEnv)
		if pw == "" {
			return "", fmt.Errorf("environment variable %s is not set or empty", c.PasswordEnv)
		}
		return pw, nil
	}
	data, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("read password: %w", err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	if pw == "" {
		return "", fmt.Errorf("password file %s is empty", c.PasswordFile)
	}
	return pw, nil
}

func (c SASLConfig) apply(sc *sarama.Config) error {
	if c.Mechanism == "" {
		return nil
	}
	pw, err := c.password()
	if err != nil {
		return fmt.Errorf("sasl: %w", err)
	}
	sc.Net.SASL.Enable = true
	sc.Net.SASL.Handshake = true
	sc.Net.SASL.Mechanism = c.mechanism()
	sc.Net.SASL.User = c.Username
	sc.Net.SASL.Password = pw
	switch c.mechanism() {
	case sarama.SASLTypeSCRAMSHA256:
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case sarama.SASLTypeSCRAMSHA512:
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	case sarama.SASLTypePlaintext:
	default:
		return fmt.Errorf("sasl mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Mechanism)
	}
	return nil
}

// scramClient adapts xdg-go/scram to sarama's SCRAMClient; sarama makes one
// per broker connection.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (s *scramClient) Begin(user, password, authzID string) error {
	// Since v1.3.0 scram's errors no longer quote the password.
	c, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return fmt.Errorf("scram: %w", err)
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) {
	if s.conv == nil {
		return "", errors.New("scram: Step before Begin")
	}
	return s.conv.Step(challenge)
}

func (s *scramClient) Done() bool { return s.conv != nil && s.conv.Done() }

func allLoopback(addrs []string) bool {
	for _, a := range addrs {
		if !tlsconfig.IsLoopback(a) {
			return false
		}
	}
	return len(addrs) > 0
}
