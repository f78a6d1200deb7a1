// Command fleetcast-allocator is a drop-in for Agones' multi-cluster
// allocation: it serves Agones' allocation API — AllocationService.Allocate
// over gRPC, and POST /gameserverallocation with the JSON of Agones'
// gateway — on one port behind mutual TLS, configured as agones-allocator
// is; places each request on the fleets whose game servers can take it,
// by fleetcast's live view and the studio's GameServerAllocationPolicies;
// and forwards it to the chosen cluster's own agones-allocator, narrowed
// to the chosen fleet, going on to the next cluster when one is full,
// unreachable or refuses its certificate (docs/allocation.md).
//
// The view is configured by the query side's environment
// (GOOGLE_CLOUD_PROJECT, FIRESTORE_DATABASE, STALE_AFTER, VIEW_CLUSTERS,
// ...: docs/operations.md); the rest by flags (fleetcast-allocator -h).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetcast/fleetcast/allocator"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/cli"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/version"
)

func main() { cli.Main("fleetcast-allocator", run) }

// config is what the flags say.
type config struct {
	addr, metricsAddr    string
	tlsCert, tlsKey      string
	clientCADir          string
	disableMTLS          bool
	policies, secretsDir string
	connectTimeout       time.Duration
	maxTries             int
	grace                time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("fleetcast-allocator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", ":8443", "HOST:PORT serving gRPC and POST /gameserverallocation over TLS (agones-allocator's 8443)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", ":8080", "HOST:PORT serving /metrics and /healthz over plain HTTP; empty: none")
	fs.StringVar(&c.tlsCert, "tls-cert", "/home/allocator/tls/tls.crt", "the server certificate, PEM (agones-allocator's allocator-tls Secret)")
	fs.StringVar(&c.tlsKey, "tls-key", "/home/allocator/tls/tls.key", "its private key, PEM")
	fs.StringVar(&c.clientCADir, "client-ca-dir", "/home/allocator/client-ca", "a directory of PEM files: the CAs whose client certificates are accepted (agones-allocator's allocator-client-ca Secret)")
	fs.BoolVar(&c.disableMTLS, "disable-mtls", false, "accept clients without a certificate (TLS only), as agones-allocator's --disable-mtls; for tests and trusted networks only")
	fs.StringVar(&c.policies, "policies", "", "a file of GameServerAllocationPolicies, YAML as kubectl get -o yaml writes them (required)")
	fs.StringVar(&c.secretsDir, "secrets-dir", "/home/allocator/clusters", "where each policy's connectionInfo.secretName is a directory of tls.crt, tls.key and ca.crt (the Secret, mounted)")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", allocator.DefaultConnectTimeout, "how long a cluster's allocator has to accept a connection before the cluster is skipped")
	fs.IntVar(&c.maxTries, "max-tries", allocator.DefaultMaxTries, "clusters one request tries at most")
	fs.DurationVar(&c.grace, "shutdown-grace", 10*time.Second, "on SIGTERM, how long requests in flight have to finish")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage of fleetcast-allocator: serves Agones' allocation API and places each request on the best cluster (docs/allocation.md).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() == 1 && fs.Arg(0) == "version" {
		return c, errVersion
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q (fleetcast-allocator -h)", fs.Args())
	}
	var bad []string
	if c.policies == "" {
		bad = append(bad, "--policies: required: the GameServerAllocationPolicies to place by")
	}
	if c.connectTimeout <= 0 {
		bad = append(bad, "--connect-timeout: want a positive duration")
	}
	if c.maxTries < 1 {
		bad = append(bad, "--max-tries: want 1 or more")
	}
	if len(bad) > 0 {
		return c, errors.New(strings.Join(bad, "; "))
	}
	return c, nil
}

var errVersion = errors.New("version")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, version.String("fleetcast-allocator"))
		return nil
	}
	if err != nil {
		return err
	}
	qcfg, err := query.ConfigFromEnv(getenv)
	if err != nil {
		return err
	}
	log := logging.New(stdout, qcfg.LogLevel, logging.WithProject(fnruntime.Project(getenv)))
	policies, err := loadPolicies(c)
	if err != nil {
		return err
	}
	serverTLS, err := serverTLS(c)
	if err != nil {
		return err
	}
	// Spans as the query side's (TRACE_SAMPLE_RATIO): to Cloud Trace in
	// the same project, a request's and each of its tries'.
	if _, err := fnruntime.Tracing(ctx, getenv, "fleetcast-allocator", qcfg.TraceSampleRatio); err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := fnruntime.FlushTracing(fctx); err != nil {
			fmt.Fprintf(stderr, "fleetcast-allocator: exporting the last spans: %v\n", err)
		}
	}()
	client, err := fnruntime.Firestore(ctx, getenv)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := query.OpenChanges(ctx, getenv, &qcfg); err != nil {
		return err
	}
	view, err := query.NewView(client, qcfg, log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	fwd := allocator.NewForwarder(allocator.ForwarderOptions{
		TLS:            func(p *allocator.Policy) (*tls.Config, error) { return allocator.LoadTLS(c.secretsDir, p) },
		ConnectTimeout: c.connectTimeout, MaxTries: c.maxTries, Log: log,
	})
	defer fwd.Close()
	svc := allocator.NewService(view, fwd, policies, log, allocator.NewMetrics(reg))
	grpcSrv := allocator.NewGRPCServer(svc)
	srv := &http.Server{Handler: allocator.Handler(svc, grpcSrv), TLSConfig: serverTLS, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if c.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		ms := &http.Server{Addr: c.metricsAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := ms.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("fleetcast-allocator: /metrics and /healthz are not served", "addr", c.metricsAddr, logging.KeyError, err.Error())
			}
		}()
		defer ms.Close()
	}
	mode := "mutual TLS"
	if c.disableMTLS {
		mode = "TLS without client certificates (--disable-mtls)"
	}
	fmt.Fprintf(stderr, "fleetcast-allocator %s: serving Agones' allocation API on %s (%s), %d policies\n", version.Version(), ln.Addr(), mode, len(policies))
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.grace)
	defer cancel()
	return srv.Shutdown(sctx)
}

// loadPolicies reads the policies and each one's client credentials, so
// that a missing Secret stops the program at once rather than a request.
func loadPolicies(c config) ([]allocator.Policy, error) {
	b, err := os.ReadFile(c.policies)
	if err != nil {
		return nil, fmt.Errorf("--policies: %w", err)
	}
	policies, err := allocator.ParsePolicies(b)
	if err != nil {
		return nil, fmt.Errorf("--policies %s: %w", c.policies, err)
	}
	var errs []error
	for i := range policies {
		if _, err := allocator.LoadTLS(c.secretsDir, &policies[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("--secrets-dir %s: %w", c.secretsDir, err)
	}
	return policies, nil
}

// serverTLS is the server's TLS, as agones-allocator's: its certificate,
// and unless --disable-mtls a client certificate signed by one of the CAs
// of --client-ca-dir.
func serverTLS(c config) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if c.disableMTLS {
		return cfg, nil
	}
	entries, err := os.ReadDir(c.clientCADir)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-dir: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for _, e := range entries {
		// A mounted Secret also holds ..data and the like: its keys are
		// the names without a leading dot.
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(c.clientCADir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("--client-ca-dir: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--client-ca-dir: %s holds no PEM certificate", e.Name())
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("--client-ca-dir %s: no CA certificate: without one no client is accepted (or pass --disable-mtls)", c.clientCADir)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return cfg, nil
}
