package fleetview

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetcast/fleetcast/fleet"
)

// Encodable reports why an answer holding d could not be encoded, or nil:
// a time outside years 1 to 9999 (what both Go's JSON encoding of a time
// and a protobuf Timestamp can express) or a string that is not UTF-8
// (protobuf's strings must be). The ingest function never stores such a
// document; one written by anything else is left out of the view, so that
// it fails no answer about the others.
func Encodable(d *fleet.Document) error {
	var bad []string
	t := func(field string, v time.Time) {
		if v.Before(firstAnswerable) || v.After(lastAnswerable) {
			bad = append(bad, field)
		}
	}
	s := func(field string, vs ...string) {
		for _, v := range vs {
			if !utf8.ValidString(v) {
				bad = append(bad, field)
				return
			}
		}
	}
	t("observedAt", d.ObservedAt)
	s("cluster, namespace, name", d.Cluster, d.Namespace, d.Name)
	s("degraded", d.Degraded)
	s("publisher", d.Publisher.ID, d.Publisher.Version)
	for k, v := range d.Labels {
		s("labels", k, v)
	}
	for k, v := range d.Annotations {
		s("annotations", k, v)
	}
	for k, v := range d.GameServerLabels {
		s("gameServerLabels", k, v)
	}
	if d.Spec != nil {
		s("spec", d.Spec.Scheduling, d.Spec.StrategyType)
	}
	if d.Status != nil {
		for k := range d.Status.Counters {
			s("status.counters", k)
		}
		for k := range d.Status.Lists {
			s("status.lists", k)
		}
	}
	if d.Rollout != nil {
		for _, set := range d.Rollout.Sets {
			s("rollout.sets", set.Name)
		}
	}
	for _, a := range d.Autoscalers {
		s("autoscalers", a.Name, a.Policy.Type, a.Policy.BufferSize, a.Policy.Key, a.Policy.WebhookHost)
		if a.Status.LastScaleTime < 0 || a.Status.LastScaleTime > fleet.MaxMicros {
			bad = append(bad, "autoscalers.status.lastScaleTime")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("cannot be answered: %s out of range or not UTF-8", strings.Join(slices.Compact(bad), ", "))
	}
	return nil
}

// ClusterEncodable is Encodable for a cluster document.
func ClusterEncodable(c *fleet.ClusterDocument) error {
	var bad []string
	if c.HeartbeatAt.Before(firstAnswerable) || c.HeartbeatAt.After(lastAnswerable) {
		bad = append(bad, "heartbeatAt")
	}
	ok := utf8.ValidString(c.Cluster) && utf8.ValidString(c.Publisher.ID) && utf8.ValidString(c.Publisher.Version)
	for k, v := range c.Labels {
		ok = ok && utf8.ValidString(k) && utf8.ValidString(v)
	}
	for k := range c.Totals.Counters {
		ok = ok && utf8.ValidString(k)
	}
	for k := range c.Totals.Lists {
		ok = ok && utf8.ValidString(k)
	}
	if !ok {
		bad = append(bad, "a string")
	}
	if len(bad) > 0 {
		return fmt.Errorf("cannot be answered: %s out of range or not UTF-8", strings.Join(bad, ", "))
	}
	return nil
}

// The times an answer can hold: years 1 to 9999.
var (
	firstAnswerable = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	lastAnswerable  = fleet.MaxMicros.Time().Add(999 * time.Nanosecond)
)
