// Command grpc-matchmaker is an example a studio can copy into a
// matchmaker written against plain gRPC stubs: it asks one cluster's
// publisher (single-cluster mode, --grpc-addr) or fleetcast-query (every
// cluster) which fleets can take a match, with grpc-go and the generated
// InformationServiceClient, over mutual TLS, and prints them, the fleet
// with the most ready game servers first. It imports nothing of fleetcast
// but the generated code, as a C#, C++ or Java matchmaker would use its
// own stubs of schemas/fleetcast/v1/information.proto.
//
// With the chart's generated certificates (NOTES.txt says how to copy them
// out of Secret fleetcast-publisher-information-client):
//
//	go run ./examples/grpc-matchmaker --addr fleetcast-publisher-information.fleetcast.svc:8443 \
//	  --cert client.crt --key client.key --ca ca.crt -l platform=pc --min-ready 1
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
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) { // -h has printed the usage
		fmt.Fprintf(os.Stderr, "grpc-matchmaker: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("grpc-matchmaker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "host:port of InformationService (required)")
	certFile := fs.String("cert", "", "this matchmaker's client certificate (PEM), for mutual TLS")
	keyFile := fs.String("key", "", "its private key (PEM)")
	caFile := fs.String("ca", "", "the CA that signed the server's certificate (PEM); the system's roots when empty")
	serverName := fs.String("server-name", "", "the name the server's certificate must carry; the host of --addr when empty")
	selector := fs.String("l", "", "label selector, e.g. platform=pc,version in (1.41,1.42)")
	minReady := fs.Int64("min-ready", 1, "only fleets with at least this many ready game servers")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("--addr is required")
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("--cert and --key go together")
	}
	creds, err := transportCredentials(*certFile, *keyFile, *caFile, *serverName)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("dial %s: %w", *addr, err)
	}
	defer conn.Close()
	client := fleetcastv1.NewInformationServiceClient(conn)

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// One page at a time, the most ready first; the server checks the
	// filter as the query API does and names a bad field.
	req := &fleetcastv1.InformRequest{
		Filter:  &fleetcastv1.FleetFilter{Selector: *selector, MinReady: *minReady},
		OrderBy: fleetcastv1.OrderBy_ORDER_BY_READY,
	}
	n := 0
	for {
		resp, err := client.Inform(ctx, req)
		if err != nil {
			st := status.Convert(err)
			return fmt.Errorf("Inform: %s: %s", st.Code(), st.Message())
		}
		for _, f := range resp.GetFleetInformation() {
			n++
			fmt.Fprintf(stdout, "%s/%s/%s\tready=%d\tallocated=%d\n", f.GetClusterName(), f.GetNamespace(), f.GetFleetName(),
				f.GetReadyGameservers(), f.GetAllocatedGameservers())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if n == 0 {
		fmt.Fprintln(stderr, "no fleet can take a match now")
	}
	return nil
}

// transportCredentials is TLS trusting caFile (or the system's roots),
// presenting the client certificate when one is given.
func transportCredentials(certFile, keyFile, caFile, serverName string) (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca %s: no PEM certificate", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert, --key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}
