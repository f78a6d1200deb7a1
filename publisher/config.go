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
	env := func(name, def string) string {
		if v := getenv("FLEETCAST_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); v != "" {
			return v
		}
		return def
	}
	var errs []error
	dur := func(name, def, usage string) *time.Duration {
		d, err := time.ParseDuration(env(name, def))
		if err != nil {
			errs = append(errs, fmt.Errorf("FLEETCAST_%s: %w", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), err))
		}
		return fs.Duration(name, d, usage)
	}
	boolean := func(name string, def bool, usage string) *bool {
		v := def
		if s := env(name, ""); s != "" {
			v = s == "true" || s == "1"
			if !v && s != "false" && s != "0" {
				errs = append(errs, fmt.Errorf("FLEETCAST_%s=%q: want true or false", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), s))
			}
		}
		return fs.Bool(name, v, usage)
	}
	hostname, _ := os.Hostname()
	podNamespace := getenv("POD_NAMESPACE")
	if podNamespace == "" {
		podNamespace = "default"
	}
	project := getenv("GOOGLE_CLOUD_PROJECT")

	cluster := fs.String("cluster", env("cluster", ""), "name of this cluster, a DNS-1123 label (required)")
	clusterLabels := fs.String("cluster-labels", env("cluster-labels", ""), "labels of this cluster for snapshots, k=v,k=v")
	projectF := fs.String("project", env("project", project), "Google Cloud project of the topic: $GOOGLE_CLOUD_PROJECT unless set")
	topic := fs.String("topic", env("topic", ""), "Pub/Sub topic ID: fleet-events-<cluster> unless set (the ingest function lets each topic write only its own cluster)")
	namespaces := fs.String("namespaces", env("namespaces", ""), "namespaces to watch, comma-separated; all when empty")
	selector := fs.String("label-selector", env("label-selector", ""), "only fleets matching this label selector")
	labelsExclude := fs.String("labels-exclude", env("labels-exclude", ""), "label keys not copied into events, comma-separated; a trailing * matches a prefix")
	annotationsInclude := fs.String("annotations-include", env("annotations-include", ""), "annotation keys copied into events (none unless listed), comma-separated; a trailing * matches a prefix")
	minInterval := dur("min-interval", DefaultMinInterval.String(), "least time between two publishes of one fleet")
	snapshotInterval := dur("snapshot-interval", DefaultSnapshotInterval.String(), "time between snapshots (the heartbeat)")
	refreshInterval := dur("refresh-interval", DefaultRefreshInterval.String(), "re-send each fleet's last event (same version, no write at ingest) once it is this old, to heal lost messages; 0 disables")
	leaderElect := boolean("leader-elect", true, "elect one publishing instance per cluster through a Lease")
	leaseName := fs.String("lease-name", env("lease-name", "fleetcast-publisher"), "name of the Lease (also holds the term)")
	leaseNamespace := fs.String("lease-namespace", env("lease-namespace", podNamespace), "namespace of the Lease: $POD_NAMESPACE, else default")
	leaseDuration := dur("lease-duration", "15s", "how long a leader's Lease lasts without renewal")
	renewDeadline := dur("renew-deadline", "10s", "how long the leader retries renewing before it stops publishing")
	retryPeriod := dur("retry-period", "2s", "time between Lease acquisition and renewal attempts")
	metricsAddr := fs.String("metrics-addr", env("metrics-addr", ":8080"), "address of /metrics, /healthz and /readyz (empty: none)")
	kubeconfig := fs.String("kubeconfig", env("kubeconfig", getenv("KUBECONFIG")), "kubeconfig file: $KUBECONFIG, else the in-cluster configuration")
	id := fs.String("id", env("id", cmp.Or(getenv("POD_NAME"), hostname)), "identity of this instance: $POD_NAME, else the hostname")
	grace := dur("shutdown-grace", "10s", "on SIGTERM, how long to try to publish what is pending")
	logLevel := fs.String("log-level", env("log-level", "INFO"), "DEBUG, INFO, WARNING or ERROR")

	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	c := Config{
		Cluster:           *cluster,
		Project:           *projectF,
		Topic:             cmp.Or(*topic, DefaultTopicPrefix+*cluster),
		Namespaces:        splitList(*namespaces),
		LabelSelector:     *selector,
		Projection:        Projection{ExcludeLabels: splitList(*labelsExclude), IncludeAnnotations: splitList(*annotationsInclude)},
		MinInterval:       *minInterval,
		SnapshotInterval:  *snapshotInterval,
		RefreshInterval:   *refreshInterval,
		LeaderElect:       *leaderElect,
		LeaseName:         *leaseName,
		LeaseNamespace:    *leaseNamespace,
		LeaseDuration:     *leaseDuration,
		RenewDeadline:     *renewDeadline,
		RetryPeriod:       *retryPeriod,
		MetricsAddr:       *metricsAddr,
		Kubeconfig:        *kubeconfig,
		ID:                *id,
		ShutdownGrace:     *grace,
		SnapshotPartBytes: fleet.DefaultSnapshotPartBytes,
		PublisherVersion:  Version,
	}
	var err error
	if c.ClusterLabels, err = parseLabels(*clusterLabels); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-labels: %w", err))
	}
	if c.LogLevel, err = logging.ParseLevel(*logLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := c.validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
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
