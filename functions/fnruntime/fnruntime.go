// Package fnruntime holds what every fleetcast Cloud Function needs at run
// time: its Firestore client and its handler, created on first use (never
// in init), and settings read from the environment.
package fnruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/pubsubtopic"
	"github.com/fleetcast/fleetcast/telemetry"
	"github.com/fleetcast/fleetcast/version"
)

// Lazy makes a value on first use. A failure is returned, not remembered:
// the next call tries again.
type Lazy[T any] struct {
	mu   sync.Mutex
	v    T
	done bool
	// New makes the value.
	New func(ctx context.Context) (T, error)
}

// Get returns the value, making it if needed.
func (l *Lazy[T]) Get(ctx context.Context) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		v, err := l.New(ctx)
		if err != nil {
			return v, err
		}
		l.v, l.done = v, true
	}
	return l.v, nil
}

// Firestore opens the database named by GOOGLE_CLOUD_PROJECT (detected
// when empty) and FIRESTORE_DATABASE (default "(default)"). The client
// outlives the request that opened it, so it does not inherit its deadline.
func Firestore(ctx context.Context, getenv func(string) string) (*firestore.Client, error) {
	project, database := getenv("GOOGLE_CLOUD_PROJECT"), getenv("FIRESTORE_DATABASE")
	if project == "" {
		project = firestore.DetectProjectID
	}
	if database == "" {
		database = firestore.DefaultDatabaseID
	}
	c, err := firestore.NewClientWithDatabase(context.WithoutCancel(ctx), project, database)
	if err != nil {
		return nil, fmt.Errorf("create firestore client: %w", err)
	}
	return c, nil
}

// PubSub opens a Pub/Sub client in GOOGLE_CLOUD_PROJECT's project
// (detected when empty), through the emulator when PUBSUB_EMULATOR_HOST
// names one; after an outage it reconnects within seconds
// (pubsubtopic.ClientOptions). The client outlives the request that
// opened it.
func PubSub(ctx context.Context, getenv func(string) string) (*pubsub.Client, error) {
	project := getenv("GOOGLE_CLOUD_PROJECT")
	if project == "" {
		project = pubsub.DetectProjectID
	}
	c, err := pubsub.NewClient(context.WithoutCancel(ctx), project, pubsubtopic.ClientOptions()...)
	if err != nil {
		return nil, fmt.Errorf("create pubsub client: %w", err)
	}
	return c, nil
}

// Env reads a function's settings from its environment, by one rule:
// a variable unset or empty is its default; any other value must parse,
// or it is an error that names the variable and says what it wants; and
// every error is kept, so that Err reports them all at once.
type Env struct {
	getenv func(string) string
	errs   []error
}

// NewEnv reads through getenv (os.Getenv in production).
func NewEnv(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// Err is every error found, joined; nil when all parsed.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// Func calls parse with the variable's value unless it is unset or empty,
// recording its error as the variable's.
func (e *Env) Func(name string, parse func(v string) error) {
	if v := e.getenv(name); v != "" {
		if err := parse(v); err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s=%q: %w", name, v, err))
		}
	}
}

// String is the variable name, def when unset.
func (e *Env) String(p *string, name, def string) {
	*p = def
	e.Func(name, func(v string) error { *p = v; return nil })
}

// Duration is a positive duration, def when unset.
func (e *Env) Duration(p *time.Duration, name string, def time.Duration) {
	*p = def
	e.Func(name, func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration such as %v", def)
		}
		*p = d
		return nil
	})
}

// Int is a whole number of at least least, def when unset.
func (e *Env) Int(p *int, name string, def, least int) {
	*p = def
	e.Func(name, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < least {
			return fmt.Errorf("want a whole number of at least %d, such as %d", least, def)
		}
		*p = n
		return nil
	})
}

// FeedShards is FEED_SHARDS, the shards of the fleets' change feed, which
// the ingest writes and the query side follows (firestoredb.Store.
// WithFeedShards): 1 to fleet.MaxFeedShards, fleet.DefaultFeedShards when
// unset. Both functions of a deployment must read the same.
func (e *Env) FeedShards(p *int) {
	*p = fleet.DefaultFeedShards
	e.Func("FEED_SHARDS", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want a whole number from 1 to %d", fleet.MaxFeedShards)
		}
		if err := fleet.ValidateFeedShards(n); err != nil {
			return err
		}
		*p = n
		return nil
	})
}

// Bytes is a positive size — a number of bytes, or a Kubernetes quantity
// such as 160Mi — def when unset.
func (e *Env) Bytes(p *int, name string, def int) {
	*p = def
	e.Func(name, func(v string) error {
		q, err := resource.ParseQuantity(v)
		n, ok := q.AsInt64()
		if err != nil || !ok || n <= 0 || n > math.MaxInt32*64 {
			return fmt.Errorf("want a positive size such as %dMi (bytes, or a quantity: Ki, Mi, Gi)", def>>20)
		}
		*p = int(n)
		return nil
	})
}

// Level is a log level (logging.ParseLevel), INFO when unset.
func (e *Env) Level(p *slog.Level, name string) {
	*p = slog.LevelInfo
	e.Func(name, func(v string) (err error) {
		*p, err = logging.ParseLevel(v)
		return err
	})
}

// Ratio is a sample ratio from 0 to 1 (telemetry.ParseRatio), def when
// unset.
func (e *Env) Ratio(p *float64, name string, def float64) {
	*p = def
	e.Func(name, func(v string) (err error) {
		*p, err = telemetry.ParseRatio(v)
		return err
	})
}

// Project is the function's Google Cloud project, as GOOGLE_CLOUD_PROJECT
// names it (Terraform sets it): the project of its traces and of the trace
// names in its logs.
func Project(getenv func(string) string) string { return getenv("GOOGLE_CLOUD_PROJECT") }

var tracing struct {
	mu sync.Mutex
	t  *telemetry.Tracing
}

// Tracing starts the process's tracing once (telemetry.Start), for the
// first function to ask: a process serves one function in production, and
// every function at once only on a developer's machine.
func Tracing(ctx context.Context, getenv func(string) string, service string, ratio float64) (*telemetry.Tracing, error) {
	tracing.mu.Lock()
	defer tracing.mu.Unlock()
	if tracing.t != nil {
		return tracing.t, nil
	}
	t, err := telemetry.Start(ctx, telemetry.Config{Service: service, Version: version.Version(), Project: Project(getenv), SampleRatio: ratio}, telemetry.WithGetenv(getenv))
	if err != nil {
		return nil, err
	}
	tracing.t = t
	return t, nil
}

// Started logs, once per instance, that function name serves, with the
// release and commit it was built from (package version): which build
// answers, in the logs of every instance.
func Started(log *slog.Logger, name string) {
	log.Info(name+" started", "release", version.Version(), "commit", version.Commit())
}

// FlushTracing exports the spans the process's tracing holds, if it
// started, and stops it: a program that serves the functions calls it as
// it stops. (The Functions Framework stops at SIGTERM without a hook: a
// function deployed by the buildpack can lose the spans of its last
// moments — OTEL_BSP_SCHEDULE_DELAY, 5 s — if it is stopped while busy;
// Cloud Run stops idle instances.)
func FlushTracing(ctx context.Context) error {
	tracing.mu.Lock()
	defer tracing.mu.Unlock()
	if tracing.t == nil {
		return nil
	}
	err := tracing.t.Shutdown(ctx)
	tracing.t = nil
	return err
}
