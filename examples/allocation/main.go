// Command allocation is a matchmaker's allocation, for a studio to copy,
// written against Agones' allocation API and nothing else: the
// AllocationService client generated from Agones' allocation.proto
// (fleetcast keeps a copy, third_party/agones, generated into
// gen/agones/allocation; Agones' own agones.dev/agones/pkg/allocation/go
// is the same API). It sends the request a matchmaker sends one cluster's
// agones-allocator. Pointed at fleetcast-allocator instead, the same
// request allocates a game server in whichever cluster fleetcast's live
// view says can take it: fleetcast places it by capacity, policy and
// freshness, goes on to the next cluster when one is full, unreachable or
// refuses its certificate, and answers with Agones' own status codes, so
// this client's handling of them stays as it was.
//
//	go run . --allocator fleetcast-allocator.example.com:443 --namespace games \
//	  --label mode=ranked --cert client.crt --key client.key --ca ca.crt
//
// The client certificate is one fleetcast-allocator trusts (its
// --client-ca-dir), and --ca the CA of its server certificate: the same
// files, made the same way, as for agones-allocator (Agones' "Allocator
// Service" guide).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleetcast/fleetcast/gen/agones/allocation"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "allocation: %v\n", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	allocator string
	request   *allocation.AllocationRequest
	tls       *tls.Config
	timeout   time.Duration
	retries   int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(cfg.allocator, grpc.WithTransportCredentials(credentials.NewTLS(cfg.tls)))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := allocation.NewAllocationServiceClient(conn)

	// UNAVAILABLE is worth a retry, after a pause: the allocator, or
	// every cluster's, could not be reached. RESOURCE_EXHAUSTED says no
	// game server anywhere can take the match now; the matchmaker decides
	// when to ask again. Anything else is the request's fault.
	var res *allocation.AllocationResponse
	try := 0
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: cfg.retries + 1}
	err = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		try++
		actx, cancel := context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
		var err error
		res, err = client.Allocate(actx, cfg.request)
		if status.Code(err) == codes.Unavailable && try <= cfg.retries {
			fmt.Fprintf(stderr, "try %d of %d: %s; retrying\n", try, cfg.retries+1, status.Convert(err).Message())
			return false, nil
		}
		return err == nil, err
	})
	switch code := status.Code(err); {
	case err == nil:
	case code == codes.ResourceExhausted:
		return fmt.Errorf("no game server can take the match now (RESOURCE_EXHAUSTED): %s", status.Convert(err).Message())
	case code != codes.Unknown:
		return fmt.Errorf("%s: %s", code, status.Convert(err).Message())
	default:
		return err
	}
	fmt.Fprintf(stdout, "game server %s/%s at %s, allocated by %s\n", cfg.request.GetNamespace(), res.GetGameServerName(), endpoint(res), res.GetSource())
	return nil
}

// endpoint is the address and the ports players connect to.
func endpoint(r *allocation.AllocationResponse) string {
	var ports []string
	for _, p := range r.GetPorts() {
		ports = append(ports, fmt.Sprintf("%d (%s)", p.GetPort(), p.GetName()))
	}
	return r.GetAddress() + " ports " + strings.Join(ports, ", ")
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("allocation", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.allocator, "allocator", "", "HOST:PORT of the allocation service: fleetcast-allocator, or one cluster's agones-allocator (required)")
	namespace := fs.String("namespace", "default", "the namespace of the game servers")
	matchLabels := map[string]string{}
	fs.Func("label", "KEY=VALUE a game server must carry (repeatable): its fleet's template labels", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", v)
		}
		matchLabels[k] = val
		return nil
	})
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "deadline of each try")
	fs.IntVar(&cfg.retries, "retries", 2, "tries more after UNAVAILABLE, with a growing pause")
	cert := fs.String("cert", "", "the client certificate the allocation service trusts (PEM)")
	key := fs.String("key", "", "its key (PEM)")
	ca := fs.String("ca", "", "the CA of the allocation service's server certificate (PEM)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.allocator == "":
		return config{}, errors.New("--allocator is required: HOST:PORT of the allocation service")
	case cfg.retries < 0:
		return config{}, fmt.Errorf("--retries %d: want 0 or more", cfg.retries)
	}
	// What a GameServerAllocation says: a Ready game server of the
	// namespace carrying the labels.
	cfg.request = &allocation.AllocationRequest{
		Namespace: *namespace,
		GameServerSelectors: []*allocation.GameServerSelector{{
			MatchLabels:     matchLabels,
			GameServerState: allocation.GameServerSelector_READY,
		}},
	}
	var err error
	if cfg.tls, err = clientTLS(*cert, *key, *ca); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// clientTLS is mutual TLS with the allocation service: this client's
// certificate, and the CA of the service's.
func clientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("--cert, --key and --ca are required: the allocation service speaks mutual TLS")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--cert and --key: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca %s: no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
