package publisher

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/metadata"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// A new writer's first snapshot tombstones every fleet it does not list,
// and its term republishes every fleet it holds: a standby whose informer
// lagged (its watch held back, its API server slow) would tombstone the
// fleets created meanwhile and revive those deleted. So before a term
// begins, the informers must hold at least what a fresh consistent list
// holds: each fleet the list has, at its resource version or newer, and no
// fleet the list lacks unless created after it.
//
// Resource versions are compared as numbers: kube-apiserver's are etcd
// revisions, which the API documents as opaque but which every release
// has kept numeric; one that is not makes catchUp wait for equality.

// catchUpPoll is how often catchUp looks at the informers again.
const catchUpPoll = 50 * time.Millisecond

// catchUp waits until every watched namespace's fleet informer holds what
// a consistent list of it holds, logging a WARNING every catchUpWarn while
// it lags, then makes the agent hold exactly what the informers do. It
// reports false when ctx ends first: the term must not start.
func (p *Publisher) catchUp(ctx context.Context) bool {
	start := p.clock.Now()
	for _, inf := range p.joiner.informers {
		ns := inf.namespace
		for attempt := 0; ; attempt++ {
			listed, err := consistentList(ctx, p.meta, ns, p.cfg.LabelSelector)
			if err == nil && p.waitCovers(ctx, inf, listed) {
				break
			}
			if ctx.Err() != nil {
				return false
			}
			reason := "the fleet informer lags a consistent list"
			if err != nil {
				reason = err.Error()
			}
			p.log.Warn("new term held back: the fleet informer must first hold what the API server does",
				"namespace", ns, "waitedSeconds", p.clock.Since(start).Seconds(), logging.KeyReason, reason)
		}
	}
	for _, inf := range p.joiner.informers {
		p.joiner.resync(inf)
	}
	if d := p.clock.Since(start); d > time.Second {
		p.log.Info("fleet informers caught up with the API server before the term", "tookSeconds", d.Seconds())
	}
	return true
}

// catchUpWarn is how long catchUp waits for the informer to cover one list
// before it lists again (and warns).
const catchUpWarn = 10 * time.Second

// listing is a consistent list: the resource version of each fleet, and
// the list's own.
type listing struct {
	rv    uint64
	items map[string]uint64 // namespace/name → resource version
}

// consistentList lists the fleets' metadata in ns with a quorum read (no
// resourceVersion: the newest, from etcd, not a cache).
func consistentList(ctx context.Context, meta metadata.Interface, ns, selector string) (listing, error) {
	l, err := meta.Resource(FleetGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return listing{}, fmt.Errorf("list fleets: %w", err)
	}
	out := listing{items: make(map[string]uint64, len(l.Items))}
	if out.rv, err = strconv.ParseUint(l.ResourceVersion, 10, 64); err != nil {
		return listing{}, fmt.Errorf("the list's resource version %q is not a number", l.ResourceVersion)
	}
	for _, m := range l.Items {
		rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
		if err != nil {
			return listing{}, fmt.Errorf("fleet %s/%s: resource version %q is not a number", m.Namespace, m.Name, m.ResourceVersion)
		}
		out.items[m.Namespace+"/"+m.Name] = rv
	}
	return out, nil
}

// waitCovers waits up to catchUpWarn for the informer to cover l.
func (p *Publisher) waitCovers(ctx context.Context, inf *nsInformers, l listing) bool {
	deadline := p.clock.Now().Add(catchUpWarn)
	for {
		if covers(inf, l) {
			return true
		}
		if !p.clock.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.clock.After(catchUpPoll):
		}
	}
}

// covers reports whether the informer's store holds what l does: every
// listed fleet at its listed version or newer, and no other fleet but
// those created after the list.
func covers(inf *nsInformers, l listing) bool {
	held := map[string]bool{}
	for _, obj := range inf.fleets.GetStore().List() {
		u := obj.(*unstructured.Unstructured)
		key := keyOf(u)
		rv, err := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
		if err != nil {
			return false
		}
		want, listed := l.items[key]
		switch {
		case listed && rv < want:
			return false // an older state than the list's
		case !listed && rv <= l.rv:
			return false // deleted before the list, and still held
		}
		held[key] = true
	}
	for key := range l.items {
		if !held[key] {
			return false // created before the list, not yet held
		}
	}
	return true
}

// resync makes the agent hold exactly the fleets of inf's store: the
// informer notifies its handlers after it updates its store, so the store
// may be ahead of what the agent heard.
func (j *joiner) resync(inf *nsInformers) {
	keys := inf.fleets.GetStore().ListKeys()
	inStore := make(map[string]bool, len(keys))
	for _, key := range keys {
		inStore[key] = true
		j.project(inf, key)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range j.agent.Keys() {
		if inf.namespace != "" && k.Namespace != inf.namespace {
			continue
		}
		if !inStore[k.Namespace+"/"+k.Name] {
			j.agent.Delete(fleet.Key{Cluster: j.cfg.Cluster, Namespace: k.Namespace, Name: k.Name})
		}
	}
}
