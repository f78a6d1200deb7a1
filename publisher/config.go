package publisher

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/version"
)

// Config is the publisher's configuration. Start from DefaultConfig; New
// refuses a Config that Validate refuses. The program fleetcast-publisher
// fills it from its flags and their FLEETCAST_* variables.
type Config struct {
	Cluster       string            // this cluster's name, a DNS-1123 label (required)
	ClusterLabels map[string]string // labels of the cluster, in snapshots
	// AllocatorEndpoint is the cluster's Agones allocator service,
	// host:port, advertised in snapshots so that matchmakers learn where
	// to allocate from the same API; empty: not advertised.
	AllocatorEndpoint string
	Project           string        // the topic's Google Cloud project (required)
	Topic             string        // the topic's ID: DefaultTopicPrefix + Cluster unless set
	Namespaces        []string      // namespaces watched; empty: all
	LabelSelector     string        // only the fleets it matches
	Projection        Projection    // which labels and annotations events carry
	MinInterval       time.Duration // least time between two publishes of one fleet
	SnapshotInterval  time.Duration // time between snapshots (the heartbeat)
	RefreshInterval   time.Duration // re-send a fleet's last event once it is this old; 0: never
	LeaderElect       bool          // one publishing instance per cluster, through a Lease
	LeaseName         string        // the Lease, which also holds the term
	LeaseNamespace    string
	LeaseDuration     time.Duration // how long a leader's Lease lasts unrenewed
	RenewDeadline     time.Duration // how long the leader retries renewing before it stops
	RetryPeriod       time.Duration // time between acquisition and renewal attempts
	MetricsAddr       string        // address of /metrics, /healthz and /readyz; empty: none
	Kubeconfig        string        // kubeconfig file; empty: the in-cluster configuration
	ID                string        // this instance's identity (required)
	ShutdownGrace     time.Duration // on shutdown, how long to publish what is pending
	SnapshotPartBytes int           // largest snapshot part, in bytes of its event
	LogLevel          slog.Level
	PublisherVersion  string // the software version events carry
	// TraceSampleRatio is the share of publishes whose traces are sampled
	// and exported to Cloud Trace, from 0 (none) to 1; the ingest function
	// follows each event's decision.
	TraceSampleRatio float64

	// Publish sends the cluster's fleets to Pub/Sub (Project, Topic, the
	// Lease). False: the publisher only serves InformationService
	// (GRPCAddr must be set), with no Pub/Sub, no Google credentials and
	// no Lease.
	Publish bool
	// GRPCAddr is the address of fleetcast.v1.InformationService, served
	// from this instance's informer cache by every instance, leader or
	// standby (single-cluster mode); empty: not served.
	GRPCAddr string
	// TLSCertFile and TLSPrivateKeyFile are the server's certificate and
	// key (PEM), required with GRPCAddr unless GRPCPlaintext; reloaded when
	// they change.
	TLSCertFile       string
	TLSPrivateKeyFile string
	// ClientCAFile makes client certificates required, and verified
	// against its CAs (mutual TLS); reloaded when it changes.
	ClientCAFile string
	// GRPCPlaintext serves InformationService without TLS (h2c): anyone
	// who reaches the port reads the cluster's fleets. Refused unless set.
	GRPCPlaintext bool
}

// DefaultTopicPrefix names a cluster's topic when Config.Topic is not set:
// fleet-events-<cluster>, what Terraform creates and the ingest function
// (TOPIC_PREFIX) expects.
const DefaultTopicPrefix = "fleet-events-"

// DefaultConfig is the configuration a deployment starts from: every
// interval and the leader election as the chart runs them, the Lease
// fleetcast-publisher in namespace default, and what is this instance's
// own (Cluster, Project, ID) left to set.
func DefaultConfig() Config {
	return Config{
		MinInterval:       time.Second,
		SnapshotInterval:  30 * time.Second,
		RefreshInterval:   10 * time.Minute,
		LeaderElect:       true,
		LeaseName:         "fleetcast-publisher",
		LeaseNamespace:    "default",
		LeaseDuration:     15 * time.Second,
		RenewDeadline:     10 * time.Second,
		RetryPeriod:       2 * time.Second,
		MetricsAddr:       ":8080",
		ShutdownGrace:     10 * time.Second,
		SnapshotPartBytes: fleet.DefaultSnapshotPartBytes,
		LogLevel:          slog.LevelInfo,
		PublisherVersion:  version.Version(),
		Publish:           true,
	}
}

// A FieldError is what Validate finds wrong with one field of a Config.
type FieldError struct {
	Field string // the Config field, as Go spells it
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// FieldErrors are the FieldErrors err holds: one, or those joined.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		switch joined, ok := err.(interface{ Unwrap() []error }); {
		case ok:
			for _, e := range joined.Unwrap() {
				walk(e)
			}
		case errors.As(err, &fe):
			out = append(out, fe)
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// Validate reports every field that is wrong, each a *FieldError, joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	if !(c.TraceSampleRatio >= 0 && c.TraceSampleRatio <= 1) {
		bad("TraceSampleRatio", "%v: want a number from 0 to 1", c.TraceSampleRatio)
	}
	if c.Cluster == "" {
		bad("Cluster", "is required")
	} else if err := fleet.ValidateClusterName(c.Cluster); err != nil {
		bad("Cluster", "%w", err)
	}
	if err := fleet.ValidateEndpoint("allocator endpoint", c.AllocatorEndpoint); err != nil {
		bad("AllocatorEndpoint", "%w", err)
	}
	if err := fleet.ValidateLabels("labels", c.ClusterLabels); err != nil {
		bad("ClusterLabels", "%w", err)
	}
	if c.Publish && c.Project == "" {
		bad("Project", "is required to publish")
	}
	if !c.Publish && c.GRPCAddr == "" {
		bad("Publish", "false, without GRPCAddr: the publisher would neither publish nor serve")
	}
	c.validateInformationService(bad)
	if _, err := labels.Parse(c.LabelSelector); err != nil {
		bad("LabelSelector", "%w", err)
	}
	for _, d := range []struct {
		field string
		d     time.Duration
	}{
		{"MinInterval", c.MinInterval}, {"SnapshotInterval", c.SnapshotInterval}, {"ShutdownGrace", c.ShutdownGrace},
		{"LeaseDuration", c.LeaseDuration}, {"RenewDeadline", c.RenewDeadline}, {"RetryPeriod", c.RetryPeriod},
	} {
		if d.d <= 0 {
			bad(d.field, "%v: must be positive", d.d)
		}
	}
	if c.LeaderElect && c.RenewDeadline >= c.LeaseDuration {
		bad("RenewDeadline", "%v must be shorter than LeaseDuration %v", c.RenewDeadline, c.LeaseDuration)
	}
	if c.RefreshInterval < 0 {
		bad("RefreshInterval", "%v: must not be negative", c.RefreshInterval)
	}
	if c.ID == "" {
		bad("ID", "must not be empty")
	}
	if c.LeaseName == "" {
		bad("LeaseName", "must not be empty")
	}
	if c.LeaseNamespace == "" {
		bad("LeaseNamespace", "must not be empty")
	}
	if c.SnapshotPartBytes <= 0 {
		bad("SnapshotPartBytes", "%d: must be positive", c.SnapshotPartBytes)
	}
	return errors.Join(errs...)
}

// validateInformationService reports what is wrong with the
// InformationService settings: plaintext only when asked for, TLS files
// only with an address, and both files of a certificate.
func (c Config) validateInformationService(bad func(field, format string, args ...any)) {
	switch {
	case c.GRPCAddr == "":
		for _, f := range []struct{ field, v string }{{"TLSCertFile", c.TLSCertFile}, {"TLSPrivateKeyFile", c.TLSPrivateKeyFile}, {"ClientCAFile", c.ClientCAFile}} {
			if f.v != "" {
				bad(f.field, "set without GRPCAddr, which serves with it")
			}
		}
	case c.GRPCPlaintext && (c.TLSCertFile != "" || c.TLSPrivateKeyFile != "" || c.ClientCAFile != ""):
		bad("GRPCPlaintext", "set with TLS files: serve either plaintext or TLS")
	case !c.GRPCPlaintext:
		if c.TLSCertFile == "" {
			bad("TLSCertFile", "is required to serve GRPCAddr, unless GRPCPlaintext says to serve without TLS")
		}
		if c.TLSPrivateKeyFile == "" {
			bad("TLSPrivateKeyFile", "is required to serve GRPCAddr, unless GRPCPlaintext says to serve without TLS")
		}
	}
}

// TopicID is the topic the publisher's transport publishes to: Topic, or
// DefaultTopicPrefix + Cluster.
func (c Config) TopicID() string {
	if c.Topic != "" {
		return c.Topic
	}
	return DefaultTopicPrefix + c.Cluster
}
