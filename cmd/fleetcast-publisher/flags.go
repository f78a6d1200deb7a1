package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/telemetry"
)

// envName is a flag's environment variable: FLEETCAST_ plus its name in
// upper snake case. A flag given wins over its variable.
func envName(flagName string) string {
	return "FLEETCAST_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig fills a publisher.Config, from publisher.DefaultConfig, with
// args and the environment getenv reads. Usage and the flag package's
// errors go to output; every error found is returned, joined, each naming
// its flag or variable.
func parseConfig(args []string, getenv func(string) string, output io.Writer) (cfg publisher.Config, printConfig bool, err error) {
	fs := flag.NewFlagSet("fleetcast-publisher", flag.ContinueOnError)
	fs.SetOutput(output)
	cfg = publisher.DefaultConfig()
	if ns := getenv("POD_NAMESPACE"); ns != "" {
		cfg.LeaseNamespace = ns
	}
	hostname, _ := os.Hostname()
	cfg.ID = cmp.Or(getenv("POD_NAME"), hostname)
	cfg.Project = getenv("GOOGLE_CLOUD_PROJECT")
	cfg.Kubeconfig = getenv("KUBECONFIG")
	f := &flags{fs: fs, getenv: getenv, flagOf: map[string]string{}}
	f.str(&cfg.Cluster, "cluster", "Cluster", "name of this cluster, a DNS-1123 label (required)")
	f.fn("cluster-labels", "ClusterLabels", "labels of this cluster for snapshots, k=v,k=v", func(s string) (err error) {
		cfg.ClusterLabels, err = parseLabels(s)
		return err
	})
	f.str(&cfg.AllocatorEndpoint, "allocator-endpoint", "AllocatorEndpoint", "HOST:PORT of this cluster's Agones allocator service, advertised on the cluster's record so matchmakers learn where to allocate; empty: none")
	f.str(&cfg.Project, "project", "Project", "Google Cloud project of the topic: $GOOGLE_CLOUD_PROJECT unless set")
	f.str(&cfg.Topic, "topic", "Topic", "Pub/Sub topic ID: "+publisher.DefaultTopicPrefix+"<cluster> unless set (the ingest function lets each topic write only its own cluster)")
	f.list(&cfg.Namespaces, "namespaces", "Namespaces", "namespaces to watch, comma-separated; all when empty")
	f.str(&cfg.LabelSelector, "label-selector", "LabelSelector", "only fleets matching this label selector")
	f.list(&cfg.Projection.ExcludeLabels, "labels-exclude", "Projection.ExcludeLabels", "label keys not copied into events, comma-separated; a trailing * matches a prefix")
	f.list(&cfg.Projection.IncludeAnnotations, "annotations-include", "Projection.IncludeAnnotations", "annotation keys copied into events (none unless listed), comma-separated; a trailing * matches a prefix")
	f.dur(&cfg.MinInterval, "min-interval", "MinInterval", "least time between two publishes of one fleet")
	f.dur(&cfg.SnapshotInterval, "snapshot-interval", "SnapshotInterval", "time between snapshots (the heartbeat)")
	f.dur(&cfg.RefreshInterval, "refresh-interval", "RefreshInterval", "re-send each fleet's last event (same version, no write at ingest) once it is this old, to heal lost messages; 0 disables")
	f.boolean(&cfg.LeaderElect, "leader-elect", "LeaderElect", "elect one publishing instance per cluster through a Lease")
	f.str(&cfg.LeaseName, "lease-name", "LeaseName", "name of the Lease (also holds the term)")
	f.str(&cfg.LeaseNamespace, "lease-namespace", "LeaseNamespace", "namespace of the Lease: $POD_NAMESPACE, else default")
	f.dur(&cfg.LeaseDuration, "lease-duration", "LeaseDuration", "how long a leader's Lease lasts without renewal")
	f.dur(&cfg.RenewDeadline, "renew-deadline", "RenewDeadline", "how long the leader retries renewing before it stops publishing")
	f.dur(&cfg.RetryPeriod, "retry-period", "RetryPeriod", "time between Lease acquisition and renewal attempts")
	f.str(&cfg.MetricsAddr, "metrics-addr", "MetricsAddr", "address of /metrics, /healthz and /readyz (empty: none)")
	f.str(&cfg.Kubeconfig, "kubeconfig", "Kubeconfig", "kubeconfig file: $KUBECONFIG, else the in-cluster configuration")
	f.str(&cfg.ID, "id", "ID", "identity of this instance: $POD_NAME, else the hostname")
	f.dur(&cfg.ShutdownGrace, "shutdown-grace", "ShutdownGrace", "on SIGTERM, how long to try to publish what is pending")
	f.fn("log-level", "LogLevel", "DEBUG, INFO, WARNING or ERROR (default INFO)", func(s string) (err error) {
		cfg.LogLevel, err = logging.ParseLevel(s)
		return err
	})
	f.fn("trace-sample-ratio", "TraceSampleRatio", "share of publishes whose traces are exported to Cloud Trace, 0 to 1 (default 0: none)", func(s string) (err error) {
		cfg.TraceSampleRatio, err = telemetry.ParseRatio(s)
		return err
	})
	f.boolean(&cfg.Publish, "publish", "Publish", "publish the fleets to Pub/Sub; false: only serve InformationService (--grpc-addr), with no Pub/Sub, Google credentials or Lease")
	f.str(&cfg.GRPCAddr, "grpc-addr", "GRPCAddr", "address of fleetcast.v1.InformationService (gRPC, Connect, gRPC-Web) for this cluster, e.g. :8443; empty: off")
	f.str(&cfg.TLSCertFile, "tls-cert-file", "TLSCertFile", "the server's certificate (PEM) for --grpc-addr; reloaded when it changes")
	f.str(&cfg.TLSPrivateKeyFile, "tls-private-key-file", "TLSPrivateKeyFile", "the server's private key (PEM) for --grpc-addr; reloaded when it changes")
	f.str(&cfg.ClientCAFile, "client-ca-file", "ClientCAFile", "CA certificates (PEM): clients of --grpc-addr must present a certificate they signed (mutual TLS); reloaded when it changes")
	f.boolean(&cfg.GRPCPlaintext, "grpc-plaintext", "GRPCPlaintext", "serve --grpc-addr without TLS (h2c): anyone who reaches the port reads the cluster's fleets")
	fs.BoolVar(&printConfig, "print-config", false, "print the configuration the flags and the environment make, as JSON, and exit without starting")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	errs := f.errs
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	cfg.Topic = cfg.TopicID()
	for _, fe := range publisher.FieldErrors(cfg.Validate()) {
		name := "--" + f.flagOf[fe.Field]
		if fe.Field == "Project" {
			name += " (or GOOGLE_CLOUD_PROJECT)"
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, fe.Err))
	}
	return cfg, printConfig, errors.Join(errs...)
}

// flags defines each flag with its default from its environment variable,
// recording the variables and the values that do not parse.
type flags struct {
	fs     *flag.FlagSet
	getenv func(string) string
	errs   []error
	// flagOf names the flag that sets each Config field, for the errors
	// of publisher.Config.Validate.
	flagOf map[string]string
}

// fn defines a flag parsed by set, first from its variable when set.
func (f *flags) fn(name, field, usage string, set func(string) error) {
	f.define(f.fs.Func, name, field, usage, set)
}

// define defines a flag with defineFunc (the FlagSet's Func or BoolFunc).
func (f *flags) define(defineFunc func(string, string, func(string) error), name, field, usage string, set func(string) error) {
	f.flagOf[field] = name
	if s := f.getenv(envName(name)); s != "" {
		if err := set(s); err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %w", envName(name), err))
		}
	}
	defineFunc(name, usage, func(s string) error {
		if err := set(s); err != nil {
			f.errs = append(f.errs, fmt.Errorf("--%s: %w", name, err))
		}
		return nil
	})
}

func (f *flags) str(p *string, name, field, usage string) {
	f.fn(name, field, usage, func(s string) error { *p = s; return nil })
	f.fs.Lookup(name).DefValue = *p
}

func (f *flags) list(p *[]string, name, field, usage string) {
	f.fn(name, field, usage, func(s string) error { *p = splitList(s); return nil })
}

func (f *flags) dur(p *time.Duration, name, field, usage string) {
	def := p.String()
	f.fn(name, field, usage, func(s string) (err error) {
		*p, err = time.ParseDuration(s)
		return err
	})
	f.fs.Lookup(name).DefValue = def
}

func (f *flags) boolean(p *bool, name, field, usage string) {
	def := fmt.Sprint(*p)
	f.define(f.fs.BoolFunc, name, field, usage, func(s string) error {
		switch s {
		case "true", "1":
			*p = true
		case "false", "0":
			*p = false
		default:
			return fmt.Errorf("%q: want true or false", s)
		}
		return nil
	})
	f.fs.Lookup(name).DefValue = def
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want key=value", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}
