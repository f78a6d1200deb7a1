package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/fleetapi"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
)

// allocateCmd are the allocate command's flags: place's, and how to reach
// the clusters' allocators.
type allocateCmd struct {
	placeCmd
	stderr                 io.Writer
	tlsCert, tlsKey, tlsCA string
	endpoints              []string
	connectTimeout         time.Duration
}

const allocateLong = `Allocate a game server for a match where it can go now: ask Place for the best
candidates (the flags are place's), then ask each candidate's cluster allocator in turn, over
mutual TLS, for a Ready game server of that fleet, until one allocates.

Each try is Agones' own Allocate, narrowed to the candidate's fleet (agones.dev/fleet) and
namespace, with the match's needs as the selector's counters, lists and players. A cluster whose
allocator has no game server for it (RESOURCE_EXHAUSTED), refuses it, cannot be reached within
--connect-timeout or refuses the certificate is skipped, and said so on stderr; a try that may
have allocated (a deadline, a broken connection) ends the command, so that one command never
allocates twice. --request-timeout bounds all the tries together.

The client certificate (--tls-cert, --tls-key) is the one the clusters' allocators trust, and
--tls-ca the CA of their server certificates, as Agones' guide sets them up for a matchmaker.

Exit codes: 3 when no fleet can take the match or every cluster tried was full, 4 when no
allocator could be reached in time, 5 when every allocator refused the certificate (or its own
was not trusted), 1 when a try may have allocated.`

func newAllocate(g *global, stdout, stderr io.Writer) *cobra.Command {
	c := &allocateCmd{placeCmd: placeCmd{g: g}, stderr: stderr}
	cmd := &cobra.Command{
		Use:   "allocate",
		Short: "Allocate a game server where a match can go now",
		Long:  allocateLong,
		Example: `  fleetcast allocate -l platform=pc --counter rooms=4 --tls-cert client.crt --tls-key client.key --tls-ca ca.crt
  fleetcast allocate --policy region=europe-west1:0 --policy :1 --tls-cert client.crt --tls-key client.key --tls-ca ca.crt -o json
  fleetcast allocate --endpoint eu-west=10.0.0.7:443 --tls-cert client.crt --tls-key client.key --tls-ca ca.crt -o name`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.run(cmd.Context(), stdout) },
	}
	c.flags(cmd, allocator.DefaultMaxTries, "how many candidates to try at most, best first")
	f := cmd.Flags()
	f.StringVar(&c.tlsCert, "tls-cert", "", "the client certificate the clusters' allocators trust, PEM (required)")
	f.StringVar(&c.tlsKey, "tls-key", "", "its private key, PEM (required)")
	f.StringVar(&c.tlsCA, "tls-ca", "", "the CA of the allocators' server certificates, PEM (required)")
	f.StringArrayVar(&c.endpoints, "endpoint", nil, "CLUSTER=HOST[:PORT]: reach this cluster's allocator there rather than at the endpoint it advertises (repeatable)")
	f.DurationVar(&c.connectTimeout, "connect-timeout", allocator.DefaultConnectTimeout, "skip a cluster whose allocator does not accept a connection within this")
	outputFlag(cmd, &c.out, append([]string{"table", "wide", "json", "yaml", "name"}, templated...)...)
	return cmd
}

// allocation is what allocate prints: where it allocated, Agones' answer
// as its REST form writes it, and every try.
type allocation struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Fleet     string `json:"fleet"`
	// Allocation is Agones' AllocationResponse in JSON, as
	// agones-allocator's REST form answers.
	Allocation json.RawMessage `json:"allocation"`
	Tries      []allocationTry `json:"tries"`
}

// allocationTry is one cluster tried.
type allocationTry struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Fleet     string `json:"fleet"`
	Endpoint  string `json:"endpoint,omitempty"`
	// Outcome is allocator.Allocated, Exhausted, Refused, Unreachable,
	// CertificateRefused, NoEndpoint or Failed.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	Millis  int64  `json:"millis"`
}

func (c *allocateCmd) run(ctx context.Context, w io.Writer) error {
	creds, err := c.credentials()
	if err != nil {
		return err
	}
	overrides, err := parseEndpoints(c.endpoints)
	if err != nil {
		return err
	}
	v, err := c.params()
	if err != nil {
		return err
	}
	req, err := fleetapi.ParsePlace(v)
	if err != nil {
		return placeFlagError(err)
	}
	var p fleetapi.Placements
	if err := withAPI(ctx, c.g, func(ctx context.Context, api fleetapi.API) error {
		var err error
		if p, err = api.Place(ctx, req); err != nil {
			return placeFlagError(err)
		}
		return nil
	}); err != nil {
		return err
	}
	if len(p.Placements) == 0 {
		return noPlacement(p)
	}

	cands := make([]allocator.Candidate, len(p.Placements))
	advertised := map[string]string{}
	for i, pl := range p.Placements {
		pol := &allocator.Policy{Name: "fleetcast allocate " + pl.Cluster, Cluster: pl.Cluster, Priority: pl.Priority, Weight: pl.Weight}
		if e, ok := overrides[pl.Cluster]; ok {
			pol.Endpoints = []string{e}
		}
		cands[i] = allocator.Candidate{Policy: pol, Namespace: pl.Namespace, Fleet: pl.Name, Capacity: pl.Available}
		advertised[pl.Cluster] = pl.AllocatorEndpoint
	}
	fwd := allocator.NewForwarder(allocator.ForwarderOptions{
		TLS:            func(*allocator.Policy) (*tls.Config, error) { return creds.Clone(), nil },
		ConnectTimeout: c.connectTimeout,
		MaxTries:       len(cands),
	})
	defer fwd.Close()
	if c.g.requestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.g.requestTimeout)
		defer cancel()
	}
	resp, tries, err := fwd.Allocate(ctx, request(req.Need), cands, func(cluster string) string { return advertised[cluster] })
	for _, t := range tries {
		if t.Outcome != allocator.Allocated && t.Outcome != allocator.Failed {
			fmt.Fprintf(c.stderr, "fleetcast: skipped %s/%s/%s%s: %s\n", t.Cluster, t.Namespace, t.Fleet, at(t.Endpoint), t.Reason())
		}
	}
	if err != nil {
		return allocationFailed(err, tries)
	}
	last := tries[len(tries)-1]
	js, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		return err
	}
	a := allocation{Cluster: last.Cluster, Namespace: last.Namespace, Fleet: last.Fleet, Allocation: js}
	for _, t := range tries {
		tr := allocationTry{Cluster: t.Cluster, Namespace: t.Namespace, Fleet: t.Fleet, Endpoint: t.Endpoint, Outcome: t.Outcome, Millis: t.Took.Milliseconds()}
		if t.Err != nil {
			tr.Error = t.Reason()
		}
		a.Tries = append(a.Tries, tr)
	}
	return printAllocation(w, c.out, a, resp)
}

// credentials are the client's TLS configuration; a file that cannot be
// read is bad input, naming its flag.
func (c *allocateCmd) credentials() (*tls.Config, error) {
	for _, f := range []struct{ flag, value string }{{"--tls-cert", c.tlsCert}, {"--tls-key", c.tlsKey}, {"--tls-ca", c.tlsCA}} {
		if f.value == "" {
			return nil, usagef("%s is required: --tls-cert and --tls-key are the client certificate the clusters' allocators trust, --tls-ca the CA of their server certificates", f.flag)
		}
	}
	pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, usagef("--tls-cert, --tls-key: %w", err)
	}
	ca, err := os.ReadFile(c.tlsCA)
	if err != nil {
		return nil, usagef("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, usagef("--tls-ca %s: holds no PEM certificate", c.tlsCA)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// parseEndpoints reads --endpoint CLUSTER=HOST[:PORT].
func parseEndpoints(flags []string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range flags {
		cluster, e, ok := strings.Cut(f, "=")
		if !ok || cluster == "" {
			return nil, usagef("--endpoint %s: want CLUSTER=HOST[:PORT]", f)
		}
		if _, err := allocator.EndpointAddress(e); err != nil {
			return nil, usagef("--endpoint %s: %w", f, err)
		}
		if _, dup := out[cluster]; dup {
			return nil, usagef("--endpoint %s: cluster %s is given twice", f, cluster)
		}
		out[cluster] = e
	}
	return out, nil
}

// request is Agones' AllocationRequest for a match's needs: a Ready game
// server with what it needs available in its counter, list and players
// (the fleet and namespace are each try's, allocator.Narrow).
func request(n fleetapi.Need) *pb.AllocationRequest {
	sel := &pb.GameServerSelector{GameServerState: pb.GameServerSelector_READY}
	if n.Counter != "" {
		sel.Counters = map[string]*pb.CounterSelector{n.Counter: {MinAvailable: max(n.CounterAvailable, 1)}}
	}
	if n.List != "" {
		sel.Lists = map[string]*pb.ListSelector{n.List: {MinAvailable: max(n.ListAvailable, 1)}}
	}
	if n.Players > 0 {
		sel.Players = &pb.PlayerSelector{MinAvailable: uint64(n.Players)}
	}
	return &pb.AllocationRequest{GameServerSelectors: []*pb.GameServerSelector{sel}}
}

func at(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	return " at " + endpoint
}

// printAllocation prints a as out says.
func printAllocation(w io.Writer, out output, a allocation, resp *pb.AllocationResponse) error {
	if ok, err := printObject(w, out, a); ok {
		return err
	}
	if out.format == "name" {
		_, err := fmt.Fprintf(w, "gameserver/%s/%s/%s\n", a.Cluster, a.Namespace, resp.GetGameServerName())
		return err
	}
	var ports []string
	for _, p := range resp.GetPorts() {
		ports = append(ports, p.GetName()+":"+strconv.Itoa(int(p.GetPort())))
	}
	var rows [][]string
	if !out.noHeaders {
		header := []string{"CLUSTER", "NAMESPACE", "FLEET", "GAMESERVER", "ADDRESS", "PORTS", "TRIES"}
		if out.wide() {
			header = append(header, "NODE", "SOURCE")
		}
		rows = append(rows, header)
	}
	row := []string{a.Cluster, a.Namespace, a.Fleet, resp.GetGameServerName(), orNone(resp.GetAddress()), orNone(strings.Join(ports, ",")), strconv.Itoa(len(a.Tries))}
	if out.wide() {
		row = append(row, orNone(resp.GetNodeName()), orNone(resp.GetSource()))
	}
	(&table{w: w}).rows(append(rows, row))
	return nil
}
