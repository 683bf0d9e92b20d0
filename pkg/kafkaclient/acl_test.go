package kafkaclient

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// TestWriteACLWarnings: on a cluster with an authorizer (kfake's ACLs), a
// principal other than Ferry's allowed to write an internal topic, by a
// literal or prefixed ACL, is named, unless denied; without knowing
// Ferry's own principal only User:* is; a cluster without an authorizer
// (SECURITY_DISABLED, as Kafka answers) is named too.
func TestWriteACLWarnings(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(plain.Auth{User: "admin", Pass: "secret"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	create := func(b *kadm.ACLBuilder) {
		t.Helper()
		res, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	create(kadm.NewACLs().Topics("__ferry_checkpoints", "__ferry_producers").Allow("User:ferry").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	create(kadm.NewACLs().Topics("__ferry_").Allow("User:app").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternPrefixed))
	create(kadm.NewACLs().Topics("__ferry_producers").Allow("User:*", "User:bob").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	create(kadm.NewACLs().Topics("__ferry_producers").Deny("User:bob").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))

	got, err := WriteACLWarnings(ctx, cl, "User:ferry", "__ferry_checkpoints", "__ferry_producers")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ACLs let [User:app] write __ferry_checkpoints", "ACLs let [User:* User:app] write __ferry_producers"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("warnings %q, want %q", got, want)
	}
	got, err = WriteACLWarnings(ctx, cl, "", "__ferry_checkpoints", "__ferry_producers")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ACLs let [User:*] write __ferry_producers"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("with our principal unknown: warnings %q, want %q", got, want)
	}

	// As a tier logs it at start, with the principal its settings name.
	var logs bytes.Buffer
	cfg := Config{BootstrapServers: c.ListenAddrs(), ClientID: "t", Version: "3.6.0", DialTimeout: 5 * time.Second,
		SASL: SASLConfig{Mechanism: "PLAIN", Username: "admin", PasswordFile: writeFile(t, "pw", []byte("secret"))}}
	cfg.WarnWritable(ctx, slog.New(slog.NewTextHandler(&logs, nil)), "__ferry_checkpoints")
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "ACLs let [User:app User:ferry] write __ferry_checkpoints") {
		t.Fatalf("WarnWritable logged %q", logs.String())
	}

	c.ControlKey(kmsg.DescribeACLs.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
		resp.ErrorCode = kerr.SecurityDisabled.Code
		return resp, nil, true
	})
	got, err = WriteACLWarnings(ctx, cl, "User:ferry", "__ferry_checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"the cluster has no authorizer: any client may write [__ferry_checkpoints]"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("without an authorizer: warnings %q, want %q", got, want)
	}
}
