// Command allocation is a matchmaker's whole path, for a studio to copy:
// it asks fleetcast where a match can go (Place: the candidates, best
// first, each with its cluster's allocator endpoint), then allocates a
// game server in the first one's cluster through that cluster's Agones
// allocator service (Allocate over gRPC with mutual TLS, a
// GameServerAllocation selecting the fleet), and prints where the players
// connect. When an allocation fails — the fleet filled up since fleetcast
// saw it, or its allocator is unreachable — it tries the next candidate.
// Place draws its candidates in proportion to their capacity, so that many
// matchmakers running this spread their matches over the fleets. It is a module of its own and imports only public packages:
// fleetcast's client and the code generated from Agones' allocation API
// (gen/agones/allocation, from fleetcast's third_party/agones).
//
//	go run . --fleetcast https://fleetcast-query-….run.app -l platform=pc --min-ready 1 \
//	  --cert client.crt --key client.key --ca ca.crt
//
// Each cluster's allocator is the endpoint its publisher advertises
// (--allocator-endpoint, on each candidate); --allocator CLUSTER=HOST:PORT
// names another. --policy SELECTOR:PRIORITY[:WEIGHT] (repeatable) ranks
// clusters by their labels, as Agones' GameServerAllocationPolicy did.
//
// The allocator's client certificate and CA come from the cluster's
// Agones installation (docs: "Allocator Service"): the Secret
// allocator-client.default holds a client certificate, allocator-tls-ca
// the CA of the allocator's server certificate.
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
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
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
	fleetcast  string
	selector   labels.Selector
	minReady   int64
	candidates int
	policy     *fleetapi.Policy
	allocators map[string]string // cluster → host:port
	tls        *tls.Config
	timeout    time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	hc, err := fleetclient.NewHTTPClient(ctx, cfg.fleetcast, fleetclient.Auth{})
	if err != nil {
		return err
	}
	fc, err := fleetclient.New(hc, cfg.fleetcast)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	placed, err := fc.Place(lctx, fleetapi.PlaceRequest{Filter: fleetapi.Query{Selector: cfg.selector},
		Need: fleetapi.Need{GameServers: cfg.minReady}, Count: cfg.candidates, Policy: cfg.policy})
	if err != nil {
		return fmt.Errorf("ask fleetcast: %w", err)
	}
	if len(placed.Placements) == 0 {
		var why []string
		for _, l := range placed.LeftOut {
			why = append(why, l.Message)
		}
		return fmt.Errorf("no fleet matching %q can take the match: nowhere to allocate (%s)", cfg.selector, strings.Join(why, "; "))
	}
	var failures []string
	for i, c := range placed.Placements {
		res, err := allocate(ctx, cfg, c)
		if err == nil {
			fmt.Fprintf(stdout, "%s/%s/%s: game server %s at %s\n", c.Cluster, c.Namespace, c.Name, res.GetGameServerName(), endpoint(res))
			return nil
		}
		failures = append(failures, fmt.Sprintf("%s/%s/%s: %v", c.Cluster, c.Namespace, c.Name, err))
		fmt.Fprintf(stderr, "candidate %d of %d, %s/%s/%s (%d %s available when fleetcast saw it): %v; trying the next\n",
			i+1, len(placed.Placements), c.Cluster, c.Namespace, c.Name, c.Available, c.Resource, err)
	}
	return fmt.Errorf("no candidate could allocate:\n  %s", strings.Join(failures, "\n  "))
}

// allocate asks the allocator of f's cluster — --allocator's, else the
// one it advertises — for a Ready game server of f, within the timeout.
func allocate(ctx context.Context, cfg config, f fleetapi.Placement) (*allocation.AllocationResponse, error) {
	addr, ok := cfg.allocators[f.Cluster]
	if !ok {
		addr = f.AllocatorEndpoint
	}
	if addr == "" {
		return nil, fmt.Errorf("cluster %s advertises no allocator endpoint (its publisher's --allocator-endpoint), and no --allocator names one", f.Cluster)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg.tls)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	res, err := allocation.NewAllocationServiceClient(conn).Allocate(ctx, &allocation.AllocationRequest{
		Namespace: f.Namespace,
		GameServerSelectors: []*allocation.GameServerSelector{{
			MatchLabels:     map[string]string{"agones.dev/fleet": f.Name},
			GameServerState: allocation.GameServerSelector_READY,
		}},
	})
	if status.Code(err) == codes.ResourceExhausted {
		return nil, fmt.Errorf("filled up since: %s", status.Convert(err).Message())
	}
	return res, err
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
	cfg := config{allocators: map[string]string{}}
	fs.StringVar(&cfg.fleetcast, "fleetcast", "", "the fleetcast query API's base URL (required)")
	sel := fs.String("l", "", "label selector of the fleets that may take the match, e.g. platform=pc,version=1.42")
	fs.Int64Var(&cfg.minReady, "min-ready", 1, "least ready game servers a candidate has")
	fs.IntVar(&cfg.candidates, "candidates", 3, "how many fleets to try, best first")
	var rules []string
	fs.Func("policy", "SELECTOR:PRIORITY[:WEIGHT], a rule over cluster labels, in order (repeatable); replaces fleetcast's default policy", func(v string) error {
		rules = append(rules, v)
		return nil
	})
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "deadline of each call")
	fs.Func("allocator", "CLUSTER=HOST:PORT, the cluster's agones-allocator service, instead of the one it advertises (repeatable)", func(v string) error {
		c, addr, ok := strings.Cut(v, "=")
		if !ok || c == "" || addr == "" {
			return fmt.Errorf("want CLUSTER=HOST:PORT, got %q", v)
		}
		cfg.allocators[c] = addr
		return nil
	})
	cert := fs.String("cert", "", "the allocator client certificate (PEM)")
	key := fs.String("key", "", "its key (PEM)")
	ca := fs.String("ca", "", "the CA of the allocators' server certificates (PEM)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.fleetcast == "":
		return config{}, errors.New("--fleetcast is required: the query API's base URL")
	case cfg.candidates < 1 || cfg.candidates > fleetapi.MaxPlacements:
		return config{}, fmt.Errorf("--candidates %d: want 1 to %d", cfg.candidates, fleetapi.MaxPlacements)
	}
	var err error
	if len(rules) > 0 {
		p, err := fleetapi.ParsePolicy(rules)
		if err != nil {
			return config{}, fmt.Errorf("--policy: %w", err)
		}
		cfg.policy = &p
	}
	if cfg.selector, err = labels.Parse(*sel); err != nil {
		return config{}, fmt.Errorf("-l: %w", err)
	}
	if cfg.tls, err = clientTLS(*cert, *key, *ca); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// clientTLS is mutual TLS with the allocators: this client's certificate,
// and their servers' CA.
func clientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("--cert, --key and --ca are required: the allocator service speaks mutual TLS")
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
