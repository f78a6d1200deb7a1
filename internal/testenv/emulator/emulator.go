// Package emulator connects tests to the Firestore and Pub/Sub emulators
// that `make test` starts. A test that needs one calls Firestore or PubSub:
// without the emulator the test fails when REQUIRE_EMULATORS=1 (the suite
// run through make) and is skipped, with a one-line reason, when run bare.
package emulator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"os"
	"strings"
	"sync"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	schema "cloud.google.com/go/pubsub/v2/apiv1"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetcast/fleetcast/internal/testenv"
)

// Environment variables the emulators are found by.
const (
	FirestoreHostEnv = "FIRESTORE_EMULATOR_HOST"
	PubSubHostEnv    = "PUBSUB_EMULATOR_HOST"
	RequireEnv       = "REQUIRE_EMULATORS"
)

// Host returns the address in the environment variable name, or ends the
// test: Fatal when the emulators are required, Skip otherwise.
func Host(tb testenv.TB, name string) string {
	tb.Helper()
	host := os.Getenv(name)
	if host != "" {
		return host
	}
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("%s is not set but %s=1: start the emulators (make test does)", name, RequireEnv)
	}
	tb.Skipf("needs the emulator at %s; run make test", name)
	return ""
}

// ProjectID returns a fresh project ID: each project is an isolated
// database in the Firestore emulator and its own namespace in Pub/Sub.
func ProjectID(tb testenv.TB) string {
	tb.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return "test-" + hex.EncodeToString(b)
}

// Firestore returns a client of the Firestore emulator for project,
// closed when the test ends; opts are added to the client's.
func Firestore(tb testenv.TB, project string, opts ...option.ClientOption) *firestore.Client {
	tb.Helper()
	Host(tb, FirestoreHostEnv)
	c, err := firestore.NewClient(context.Background(), project, opts...)
	if err != nil {
		tb.Fatalf("firestore client: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// PubSub returns a client of the Pub/Sub emulator for project, closed when
// the test ends.
func PubSub(tb testenv.TB, project string) *pubsub.Client {
	tb.Helper()
	Host(tb, PubSubHostEnv)
	c, err := pubsub.NewClient(context.Background(), project)
	if err != nil {
		tb.Fatalf("pubsub client: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// SchemaClient returns a Pub/Sub schema admin client of the emulator. The
// generated admin clients do not read PUBSUB_EMULATOR_HOST themselves.
func SchemaClient(tb testenv.TB) *schema.SchemaClient {
	tb.Helper()
	host := Host(tb, PubSubHostEnv)
	c, err := schema.NewSchemaClient(context.Background(), EmulatorOptions(host)...)
	if err != nil {
		tb.Fatalf("pubsub schema client: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// EmulatorOptions are the client options that reach an emulator at host:
// plaintext, no credentials.
func EmulatorOptions(host string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(host),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// RPCs counts the RPCs a client sends, by method, and can make a method
// fail as production Firestore does where the emulator never would (it
// never asks for an index, for one).
type RPCs struct {
	mu   sync.Mutex
	n    map[string]int
	fail map[string]error
}

// Fail makes every later call of method (its last path element, such as
// RunAggregationQuery) return err without reaching the emulator; nil
// lets them through again.
func (r *RPCs) Fail(method string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail == nil {
		r.fail = map[string]error{}
	}
	r.fail[method] = err
}

// FirestoreOptions are the options of a Firestore emulator client that
// counts its RPCs in r: its own connection (the client ignores dial
// options with the emulator), as the client would dial it, with counting
// interceptors.
func (r *RPCs) FirestoreOptions(tb testenv.TB) []option.ClientOption {
	tb.Helper()
	host := Host(tb, FirestoreHostEnv)
	count := func(method string) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.n == nil {
			r.n = map[string]int{}
		}
		name := method[strings.LastIndex(method, "/")+1:]
		r.n[name]++
		return r.fail[name]
	}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := count(method); err != nil {
			return err
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := count(method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	conn, err := grpc.NewClient("passthrough:///"+host,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(ownerCreds{}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream))
	if err != nil {
		tb.Fatalf("dial the Firestore emulator: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return []option.ClientOption{option.WithGRPCConn(conn)}
}

// ownerCreds are the emulator's credentials, as the Firestore client
// sends them: every request is the owner's.
type ownerCreds struct{}

func (ownerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}

func (ownerCreds) RequireTransportSecurity() bool { return false }

// Take returns the counts since the last Take, and starts again.
func (r *RPCs) Take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.n
	r.n = nil
	if out == nil {
		out = map[string]int{}
	}
	return out
}
