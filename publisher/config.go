package publisher

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Config is the publisher's configuration: flags whose defaults come from
// environment variables (FLEETCAST_ plus the flag's name in upper snake
// case), documented in one table in the README.
type Config struct {
	Cluster           string
	ClusterLabels     map[string]string
	Project           string
	Topic             string
	Namespaces        []string // empty: all
	LabelSelector     string
	Projection        Projection
	MinInterval       time.Duration
	SnapshotInterval  time.Duration
	RefreshInterval   time.Duration
	LeaderElect       bool
	LeaseName         string
	LeaseNamespace    string
	LeaseDuration     time.Duration
	RenewDeadline     time.Duration
	RetryPeriod       time.Duration
	MetricsAddr       string
	Kubeconfig        string
	ID                string
	ShutdownGrace     time.Duration
	SnapshotPartBytes int
	LogLevel          slog.Level
	PublisherVersion  string
}

// The defaults of the intervals' flags.
const (
	DefaultMinInterval      = time.Second
	DefaultSnapshotInterval = 30 * time.Second
	DefaultRefreshInterval  = 10 * time.Minute
)

// Version is the publisher's software version, set at build time with
// -ldflags "-X github.com/fleetcast/fleetcast/publisher.Version=...".
var Version = "dev"

// DefaultTopicPrefix names a cluster's topic when --topic is not set:
// fleet-events-<cluster>, what Terraform creates and the ingest function
// (TOPIC_PREFIX) expects.
const DefaultTopicPrefix = "fleet-events-"

// ParseConfig parses args with defaults from getenv. Usage and errors go to
// output.
func ParseConfig(args []string, getenv func(string) string, output io.Writer) (Config, error) {
	fs := flag.NewFlagSet("fleetcast-publisher", flag.ContinueOnError)
	fs.SetOutput(output)
	var c Config
	raw := defineFlags(fs, &c, getenv)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	errs := raw.errs
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	c.Topic = cmp.Or(c.Topic, DefaultTopicPrefix+c.Cluster)
	c.Namespaces = splitList(raw.namespaces)
	c.Projection = Projection{ExcludeLabels: splitList(raw.labelsExclude), IncludeAnnotations: splitList(raw.annotationsInclude)}
	c.SnapshotPartBytes, c.PublisherVersion = fleet.DefaultSnapshotPartBytes, Version
	var err error
	if c.ClusterLabels, err = parseLabels(raw.clusterLabels); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-labels: %w", err))
	}
	if c.LogLevel, err = logging.ParseLevel(raw.logLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := c.validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// rawFlags are the flags parsed further than the flag package does, and
// the errors of environment variables that did not parse.
type rawFlags struct {
	clusterLabels, namespaces, labelsExclude, annotationsInclude, logLevel string
	errs                                                                   []error
}

// defineFlags defines every flag on fs, writing into c or raw, each with
// its default from the environment (FLEETCAST_ plus its name in upper
// snake case).
func defineFlags(fs *flag.FlagSet, c *Config, getenv func(string) string) *rawFlags {
	raw := &rawFlags{}
	e := envDefaults{getenv: getenv, errs: &raw.errs}
	hostname, _ := os.Hostname()
	podNamespace := cmp.Or(getenv("POD_NAMESPACE"), "default")
	fs.StringVar(&c.Cluster, "cluster", e.str("cluster", ""), "name of this cluster, a DNS-1123 label (required)")
	fs.StringVar(&raw.clusterLabels, "cluster-labels", e.str("cluster-labels", ""), "labels of this cluster for snapshots, k=v,k=v")
	fs.StringVar(&c.Project, "project", e.str("project", getenv("GOOGLE_CLOUD_PROJECT")), "Google Cloud project of the topic: $GOOGLE_CLOUD_PROJECT unless set")
	fs.StringVar(&c.Topic, "topic", e.str("topic", ""), "Pub/Sub topic ID: fleet-events-<cluster> unless set (the ingest function lets each topic write only its own cluster)")
	fs.StringVar(&raw.namespaces, "namespaces", e.str("namespaces", ""), "namespaces to watch, comma-separated; all when empty")
	fs.StringVar(&c.LabelSelector, "label-selector", e.str("label-selector", ""), "only fleets matching this label selector")
	fs.StringVar(&raw.labelsExclude, "labels-exclude", e.str("labels-exclude", ""), "label keys not copied into events, comma-separated; a trailing * matches a prefix")
	fs.StringVar(&raw.annotationsInclude, "annotations-include", e.str("annotations-include", ""), "annotation keys copied into events (none unless listed), comma-separated; a trailing * matches a prefix")
	fs.DurationVar(&c.MinInterval, "min-interval", e.dur("min-interval", DefaultMinInterval), "least time between two publishes of one fleet")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", e.dur("snapshot-interval", DefaultSnapshotInterval), "time between snapshots (the heartbeat)")
	fs.DurationVar(&c.RefreshInterval, "refresh-interval", e.dur("refresh-interval", DefaultRefreshInterval), "re-send each fleet's last event (same version, no write at ingest) once it is this old, to heal lost messages; 0 disables")
	fs.BoolVar(&c.LeaderElect, "leader-elect", e.boolean("leader-elect", true), "elect one publishing instance per cluster through a Lease")
	fs.StringVar(&c.LeaseName, "lease-name", e.str("lease-name", "fleetcast-publisher"), "name of the Lease (also holds the term)")
	fs.StringVar(&c.LeaseNamespace, "lease-namespace", e.str("lease-namespace", podNamespace), "namespace of the Lease: $POD_NAMESPACE, else default")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", e.dur("lease-duration", 15*time.Second), "how long a leader's Lease lasts without renewal")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", e.dur("renew-deadline", 10*time.Second), "how long the leader retries renewing before it stops publishing")
	fs.DurationVar(&c.RetryPeriod, "retry-period", e.dur("retry-period", 2*time.Second), "time between Lease acquisition and renewal attempts")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", e.str("metrics-addr", ":8080"), "address of /metrics, /healthz and /readyz (empty: none)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", e.str("kubeconfig", getenv("KUBECONFIG")), "kubeconfig file: $KUBECONFIG, else the in-cluster configuration")
	fs.StringVar(&c.ID, "id", e.str("id", cmp.Or(getenv("POD_NAME"), hostname)), "identity of this instance: $POD_NAME, else the hostname")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", e.dur("shutdown-grace", 10*time.Second), "on SIGTERM, how long to try to publish what is pending")
	fs.StringVar(&raw.logLevel, "log-level", e.str("log-level", "INFO"), "DEBUG, INFO, WARNING or ERROR")
	return raw
}

// envDefaults reads a flag's default from FLEETCAST_<NAME>, recording the
// values that do not parse.
type envDefaults struct {
	getenv func(string) string
	errs   *[]error
}

func envName(flagName string) string {
	return "FLEETCAST_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (e envDefaults) str(name, def string) string {
	return cmp.Or(e.getenv(envName(name)), def)
}

func (e envDefaults) dur(name string, def time.Duration) time.Duration {
	s := e.getenv(envName(name))
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		*e.errs = append(*e.errs, fmt.Errorf("%s: %w", envName(name), err))
		return def
	}
	return d
}

func (e envDefaults) boolean(name string, def bool) bool {
	switch s := e.getenv(envName(name)); s {
	case "":
		return def
	case "true", "1":
		return true
	case "false", "0":
		return false
	default:
		*e.errs = append(*e.errs, fmt.Errorf("%s=%q: want true or false", envName(name), s))
		return def
	}
}

func (c Config) validate() error {
	var errs []error
	if c.Cluster == "" {
		errs = append(errs, errors.New("--cluster is required"))
	} else if err := fleet.ValidateClusterName(c.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("--cluster: %w", err))
	}
	if err := fleet.ValidateLabels("--cluster-labels", c.ClusterLabels); err != nil {
		errs = append(errs, err)
	}
	if c.Project == "" {
		errs = append(errs, errors.New("--project is required (or GOOGLE_CLOUD_PROJECT)"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("--topic must not be empty"))
	}
	if _, err := labels.Parse(c.LabelSelector); err != nil {
		errs = append(errs, fmt.Errorf("--label-selector: %w", err))
	}
	for name, d := range map[string]time.Duration{
		"--min-interval": c.MinInterval, "--snapshot-interval": c.SnapshotInterval, "--shutdown-grace": c.ShutdownGrace,
		"--lease-duration": c.LeaseDuration, "--renew-deadline": c.RenewDeadline, "--retry-period": c.RetryPeriod,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %v: must be positive", name, d))
		}
	}
	if c.LeaderElect && c.RenewDeadline >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("--renew-deadline %v must be shorter than --lease-duration %v", c.RenewDeadline, c.LeaseDuration))
	}
	if c.RefreshInterval < 0 {
		errs = append(errs, fmt.Errorf("--refresh-interval %v: must not be negative", c.RefreshInterval))
	}
	if c.ID == "" {
		errs = append(errs, errors.New("--id must not be empty"))
	}
	if c.LeaseName == "" || c.LeaseNamespace == "" {
		errs = append(errs, errors.New("--lease-name and --lease-namespace must not be empty"))
	}
	return errors.Join(errs...)
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
