// Package fleetapi is the query API's core, independent of HTTP: it reads
// the stored fleets and clusters and answers with the shapes of
// schemas/query_api.openapi.yaml. The QueryFleets function serves it over
// HTTP; the fleetcast CLI calls it directly on Firestore.
package fleetapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetquery"
)

// Reader is what the API reads from.
type Reader interface {
	ListFleets(ctx context.Context, f firestoredb.FleetFilter) ([]*fleet.Document, error)
	FleetsWithLabel(ctx context.Context, key string) ([]*fleet.Document, error)
	GetFleet(ctx context.Context, k fleet.Key) (*fleet.Document, error)
	ListClusters(ctx context.Context) ([]*fleet.ClusterDocument, error)
	GetCluster(ctx context.Context, name string) (*fleet.ClusterDocument, error)
}

var _ Reader = (*firestoredb.Store)(nil)

// DefaultStaleAfter is three default snapshot intervals: a cluster whose
// last heartbeat is older is stale, and its fleets are left out unless
// asked for.
const DefaultStaleAfter = 90 * time.Second

// ErrNotFound is returned for a fleet or cluster that does not exist (a
// deleted fleet's tombstone included).
var ErrNotFound = errors.New("not found")

// Service answers queries.
type Service struct {
	store      Reader
	now        func() time.Time
	staleAfter time.Duration
}

// NewService returns a Service over store.
func NewService(store Reader, now func() time.Time, staleAfter time.Duration) *Service {
	return &Service{store: store, now: now, staleAfter: staleAfter}
}

// ListFleets answers one page of a fleet query. It reads the documents the
// equality filters select, no more, and the clusters' heartbeats.
func (s *Service) ListFleets(ctx context.Context, q fleetquery.Query) (fleetquery.FleetList, error) {
	cs, err := s.store.ListClusters(ctx)
	if err != nil {
		return fleetquery.FleetList{}, err
	}
	if err := knownKeys(q, cs); err != nil {
		return fleetquery.FleetList{}, err
	}
	stale := s.staleFunc(cs)
	docs, err := s.store.ListFleets(ctx, firestoredb.FleetFilter{Clusters: q.Clusters, Namespace: q.Namespace, Labels: q.Equalities()})
	if err != nil {
		return fleetquery.FleetList{}, err
	}
	matched := docs[:0]
	for _, d := range docs {
		if q.Matches(d, stale(d.Cluster)) {
			matched = append(matched, d)
		}
	}
	page, next := q.Page(matched)
	out := fleetquery.FleetList{Items: make([]fleetquery.Fleet, 0, len(page)), NextPageToken: next, TotalSize: len(matched)}
	for _, d := range page {
		out.Items = append(out.Items, fleetquery.NewFleet(d, stale(d.Cluster)))
	}
	return out, nil
}

// GetFleet returns one live fleet, or ErrNotFound. k must be valid.
func (s *Service) GetFleet(ctx context.Context, k fleet.Key) (fleetquery.Fleet, error) {
	d, err := s.store.GetFleet(ctx, k)
	if err != nil {
		return fleetquery.Fleet{}, err
	}
	if d == nil || d.Deleted {
		return fleetquery.Fleet{}, fmt.Errorf("fleet %s: %w", k, ErrNotFound)
	}
	c, err := s.store.GetCluster(ctx, k.Cluster)
	if err != nil {
		return fleetquery.Fleet{}, err
	}
	return fleetquery.NewFleet(d, fleetquery.IsStale(c, s.now(), s.staleAfter)), nil
}

// ListClusters returns every cluster.
func (s *Service) ListClusters(ctx context.Context) (fleetquery.ClusterList, error) {
	cs, err := s.store.ListClusters(ctx)
	if err != nil {
		return fleetquery.ClusterList{}, err
	}
	out := fleetquery.ClusterList{Items: make([]fleetquery.Cluster, 0, len(cs))}
	for _, c := range cs {
		out.Items = append(out.Items, fleetquery.NewCluster(c, fleetquery.IsStale(c, s.now(), s.staleAfter)))
	}
	return out, nil
}

// GetCluster returns one cluster, or ErrNotFound.
func (s *Service) GetCluster(ctx context.Context, name string) (fleetquery.Cluster, error) {
	c, err := s.store.GetCluster(ctx, name)
	if err != nil {
		return fleetquery.Cluster{}, err
	}
	if c == nil {
		return fleetquery.Cluster{}, fmt.Errorf("cluster %s: %w", name, ErrNotFound)
	}
	return fleetquery.NewCluster(c, fleetquery.IsStale(c, s.now(), s.staleAfter)), nil
}

// LabelValues sums the live fleets carrying label key by value; fleets of
// stale clusters only when includeStale.
func (s *Service) LabelValues(ctx context.Context, key string, includeStale bool) (fleetquery.LabelValues, error) {
	stale, err := s.staleness(ctx)
	if err != nil {
		return fleetquery.LabelValues{}, err
	}
	docs, err := s.store.FleetsWithLabel(ctx, key)
	if err != nil {
		return fleetquery.LabelValues{}, err
	}
	live := docs[:0]
	for _, d := range docs {
		if !d.Deleted && (includeStale || !stale(d.Cluster)) {
			live = append(live, d)
		}
	}
	return fleetquery.AggregateLabel(key, live), nil
}

// knownKeys rejects a counter or list that no cluster reports in its
// totals: most likely a typo, which would otherwise quietly match nothing.
func knownKeys(q fleetquery.Query, cs []*fleet.ClusterDocument) error {
	var counter, list bool
	for _, c := range cs {
		_, hasCounter := c.Totals.Counters[q.Counter]
		_, hasList := c.Totals.Lists[q.List]
		counter, list = counter || hasCounter, list || hasList
	}
	if q.Counter != "" && !counter {
		return &fleetquery.ParamError{Param: "counter", Message: fmt.Sprintf("no cluster reports a counter %q", q.Counter)}
	}
	if q.List != "" && !list {
		return &fleetquery.ParamError{Param: "list", Message: fmt.Sprintf("no cluster reports a list %q", q.List)}
	}
	return nil
}

// staleness reads the clusters' heartbeats once per request.
func (s *Service) staleness(ctx context.Context) (func(cluster string) bool, error) {
	cs, err := s.store.ListClusters(ctx)
	if err != nil {
		return nil, err
	}
	return s.staleFunc(cs), nil
}

func (s *Service) staleFunc(cs []*fleet.ClusterDocument) func(cluster string) bool {
	byName := make(map[string]*fleet.ClusterDocument, len(cs))
	for _, c := range cs {
		byName[c.Cluster] = c
	}
	now := s.now()
	return func(cluster string) bool { return fleetquery.IsStale(byName[cluster], now, s.staleAfter) }
}
