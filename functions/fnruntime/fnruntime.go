// Package fnruntime holds what every fleetcast Cloud Function needs at run
// time: its Firestore client and its handler, created on first use (never
// in init), and settings read from the environment.
package fnruntime

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"cloud.google.com/go/firestore"
	"k8s.io/apimachinery/pkg/api/resource"
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

// Duration reads a positive duration from the variable name, def when unset.
func Duration(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as %v", name, v, def)
	}
	return d, nil
}

// Bytes reads a positive size from the variable name — a number of bytes,
// or a Kubernetes quantity such as 160Mi — def when unset.
func Bytes(getenv func(string) string, name string, def int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	q, err := resource.ParseQuantity(v)
	n, ok := q.AsInt64()
	if err != nil || !ok || n <= 0 || n > math.MaxInt32*64 {
		return 0, fmt.Errorf("%s=%q: want a positive size such as %dMi (bytes, or a quantity: Ki, Mi, Gi)", name, v, def>>20)
	}
	return int(n), nil
}
