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
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fleetcast/fleetcast/logging"
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
