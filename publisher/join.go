package publisher

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// The Agones resources joined into each fleet's state: its GameServerSets
// (rollout progress) and the FleetAutoscalers targeting it.
var (
	GameServerSetGVR   = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameserversets"}
	FleetAutoscalerGVR = schema.GroupVersionResource{Group: "autoscaling.agones.dev", Version: "v1", Resource: "fleetautoscalers"}
)

// templateHashField is where the trimming transforms keep the hash of the
// game server template they drop, at the top of the cached object, out of
// reach of the annotations an event may copy.
const templateHashField = "fleetcast.dev/templateHash"

// trimTemplate runs on each Fleet and GameServerSet as it is decoded,
// before the informer caches it, so it may be changed here (and only here):
// the game server template and managedFields are most of the object, and
// of the template only its labels (the game servers', State.
// GameServerLabels) and whether a set's template is its fleet's matter.
func trimTemplate(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	tmpl, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "template")
	u.Object[templateHashField] = templateHash(tmpl)
	labels, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "template", "metadata", "labels")
	unstructured.RemoveNestedField(u.Object, "spec", "template")
	if spec, ok := u.Object["spec"].(map[string]any); ok && labels != nil {
		spec["template"] = map[string]any{"metadata": map[string]any{"labels": labels}}
	}
	return u, nil
}

// templateHash fingerprints a game server template so that two compare
// equal where Agones' fleet controller finds them semantically equal
// (apiequality.Semantic.DeepEqual on the typed templates): absent, null
// and zero values are the same, and quantities compare by value ("1000m"
// is "1"), since Agones writes the set's template from Go types while the
// user wrote the fleet's.
func templateHash(tmpl any) string {
	b, err := json.Marshal(normalize("", tmpl))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// normalize drops zero values (nil, "", false, 0, empty maps and lists)
// and canonicalizes the quantities of resources' limits and requests.
func normalize(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		quantities := key == "limits" || key == "requests"
		out := map[string]any{}
		for k, c := range v {
			n := normalize(k, c)
			if quantities && n != nil {
				if q, err := resource.ParseQuantity(fmt.Sprint(n)); err == nil {
					n = q.String()
				}
			}
			if n != nil {
				out[k] = n
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(v) == 0 {
			return nil
		}
		out := make([]any, len(v))
		for i, c := range v {
			out[i] = normalize("", c)
		}
		return out
	case string:
		if v == "" {
			return nil
		}
	case bool:
		if !v {
			return nil
		}
	case int64:
		if v == 0 {
			return nil
		}
	case float64:
		if v == 0 {
			return nil
		}
	}
	return v
}

func templateHashOf(u *unstructured.Unstructured) string {
	h, _ := u.Object[templateHashField].(string)
	return h
}

// ownerFleet is the name of the Fleet owning a GameServerSet: its
// controller owner reference, or Agones' agones.dev/fleet label.
func ownerFleet(u *unstructured.Unstructured) string {
	for _, ref := range u.GetOwnerReferences() {
		if ref.Kind == "Fleet" && ref.Controller != nil && *ref.Controller {
			return ref.Name
		}
	}
	return u.GetLabels()["agones.dev/fleet"]
}

// projectSet reads a fleet's GameServerSet; current when its template is
// the fleet's.
func projectSet(u *unstructured.Unstructured, fleetTemplateHash string) (fleet.GameServerSet, error) {
	r := reader{obj: u.Object}
	s := fleet.GameServerSet{
		Name:              u.GetName(),
		Current:           fleetTemplateHash != "" && templateHashOf(u) == fleetTemplateHash,
		Replicas:          r.int("status", "replicas"),
		ReadyReplicas:     r.int("status", "readyReplicas"),
		AllocatedReplicas: r.int("status", "allocatedReplicas"),
		ReservedReplicas:  r.int("status", "reservedReplicas"),
	}
	if r.err != nil {
		return fleet.GameServerSet{}, fmt.Errorf("gameserverset %s: %w", u.GetName(), r.err)
	}
	return s, nil
}

// autoscalerTarget is the name of the Fleet a FleetAutoscaler scales.
func autoscalerTarget(u *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(u.Object, "spec", "fleetName")
	return name
}

// projectAutoscaler reads a FleetAutoscaler: policy, sync interval and
// status. Of a webhook it keeps the host alone: a URL's path or query may
// carry a secret.
func projectAutoscaler(u *unstructured.Unstructured) (fleet.Autoscaler, error) {
	r := reader{obj: u.Object}
	typ := r.string("spec", "policy", "type")
	p := fleet.AutoscalerPolicy{Type: typ}
	switch typ {
	case "Buffer":
		p.BufferSize = r.intOrString("spec", "policy", "buffer", "bufferSize")
		p.MinReplicas = r.int("spec", "policy", "buffer", "minReplicas")
		p.MaxReplicas = r.int("spec", "policy", "buffer", "maxReplicas")
	case "Counter", "List":
		sub := map[string]string{"Counter": "counter", "List": "list"}[typ]
		p.Key = r.string("spec", "policy", sub, "key")
		p.BufferSize = r.intOrString("spec", "policy", sub, "bufferSize")
		p.MinCapacity = r.int("spec", "policy", sub, "minCapacity")
		p.MaxCapacity = r.int("spec", "policy", sub, "maxCapacity")
	case "Webhook":
		p.WebhookHost = webhookHost(&r)
	}
	a := fleet.Autoscaler{
		Name:        u.GetName(),
		Policy:      p,
		SyncSeconds: r.int("spec", "sync", "fixedInterval", "seconds"),
		Status: fleet.AutoscalerStatus{
			CurrentReplicas: r.int("status", "currentReplicas"),
			DesiredReplicas: r.int("status", "desiredReplicas"),
			AbleToScale:     r.bool("status", "ableToScale"),
			ScalingLimited:  r.bool("status", "scalingLimited"),
		},
	}
	if t := r.string("status", "lastScaleTime"); t != "" {
		parsed, err := time.Parse(time.RFC3339, t)
		if err != nil {
			return fleet.Autoscaler{}, fmt.Errorf("fleetautoscaler %s: status.lastScaleTime %q: not RFC 3339", u.GetName(), t)
		}
		a.Status.LastScaleTime = fleet.MicrosOf(parsed)
	}
	if r.err != nil {
		return fleet.Autoscaler{}, fmt.Errorf("fleetautoscaler %s: %w", u.GetName(), r.err)
	}
	return a, nil
}

// webhookHost is the host a Webhook policy calls: its URL's, or the
// service's in-cluster name (Agones defaults its namespace to "default").
func webhookHost(r *reader) string {
	if raw := r.string("spec", "policy", "webhook", "url"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return "(unparsable URL)"
		}
		return u.Host
	}
	name := r.string("spec", "policy", "webhook", "service", "name")
	if name == "" {
		return ""
	}
	ns := r.string("spec", "policy", "webhook", "service", "namespace")
	if ns == "" {
		ns = "default"
	}
	return name + "." + ns + ".svc"
}

// nsInformers are the informers of one watched namespace (or of all).
type nsInformers struct {
	namespace             string // "" for all
	fleets, sets, scalers cache.SharedIndexInformer
	// setsSource and scalersSource say whether sets and scalers list.
	setsSource, scalersSource *source
}

// byFleet indexes sets and autoscalers by the namespace/name of their fleet.
const byFleet = "fleet"

// joiner projects each fleet with its sets and autoscalers into the agent.
// One mutex orders every projection and delete: each reads the caches as
// they are when it runs (an informer updates its cache before it notifies),
// so the last to run holds the newest of everything, and a delete never
// overtakes a projection of the fleet it removes.
type joiner struct {
	cfg       Config
	agent     *Agent
	m         *Metrics
	log       *slog.Logger
	mu        sync.Mutex
	informers []*nsInformers
	// sources are the informers' optional sources, in order.
	sources []*source
	// synced: the caches are full, so a missing fleet is missing.
	synced bool
	// reported are the fleets whose autoscaler problem was logged.
	reported map[string]bool
}

func (j *joiner) wire(inf *nsInformers) error {
	for _, i := range []cache.SharedIndexInformer{inf.fleets, inf.sets} {
		if err := i.SetTransform(trimTemplate); err != nil {
			return fmt.Errorf("informer: %w", err)
		}
	}
	if err := inf.scalers.SetTransform(trimManagedFields); err != nil {
		return fmt.Errorf("informer: %w", err)
	}
	setFleet, scalerFleet := inNamespace(ownerFleet), inNamespace(autoscalerTarget)
	index := func(fleetOf func(*unstructured.Unstructured) string) cache.Indexers {
		return cache.Indexers{byFleet: func(obj any) ([]string, error) {
			if u, ok := obj.(*unstructured.Unstructured); ok && fleetOf(u) != "" {
				return []string{fleetOf(u)}, nil
			}
			return nil, nil
		}}
	}
	if err := inf.sets.AddIndexers(index(setFleet)); err != nil {
		return fmt.Errorf("gameserverset informer: %w", err)
	}
	if err := inf.scalers.AddIndexers(index(scalerFleet)); err != nil {
		return fmt.Errorf("fleetautoscaler informer: %w", err)
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{inf.fleets, j.events(inf, keyOf, true, j.delete)},
		{inf.sets, j.events(inf, setFleet, false, nil)},
		{inf.scalers, j.events(inf, scalerFleet, false, nil)},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return fmt.Errorf("informer: %w", err)
		}
	}
	// An autoscaler retargeted, added or removed, or a fleet come or
	// gone, changes what is misconfigured.
	recount := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { j.recount() },
		DeleteFunc: func(obj any) { j.recount() },
		UpdateFunc: func(old, obj any) {
			o, n := asUnstructured(old), asUnstructured(obj)
			if o != nil && n != nil && autoscalerTarget(o) != autoscalerTarget(n) {
				j.recount()
			}
		},
	}
	for _, i := range []cache.SharedIndexInformer{inf.fleets, inf.scalers} {
		if _, err := i.AddEventHandler(recount); err != nil {
			return fmt.Errorf("informer: %w", err)
		}
	}
	return nil
}

func asUnstructured(obj any) *unstructured.Unstructured {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

func keyOf(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

// inNamespace turns the name of an object's fleet into its key
// (namespace/name); "" when it names none.
func inNamespace(name func(*unstructured.Unstructured) string) func(*unstructured.Unstructured) string {
	return func(u *unstructured.Unstructured) string {
		if n := name(u); n != "" {
			return u.GetNamespace() + "/" + n
		}
		return ""
	}
}

// events projects, for each object added, updated or deleted, the fleet
// fleetOf says it belongs to — on an update also the one it belonged to,
// when a set or an autoscaler changed fleets; gone, if set, replaces that
// on delete. counted: the notifications count in InformerEvents (fleets').
func (j *joiner) events(inf *nsInformers, fleetOf func(*unstructured.Unstructured) string, counted bool, gone func(*unstructured.Unstructured)) cache.ResourceEventHandler {
	count := func(kind string) {
		if counted {
			j.m.InformerEvents.WithLabelValues(kind).Inc()
		}
	}
	changed := func(u *unstructured.Unstructured) {
		if k := fleetOf(u); k != "" {
			j.project(inf, k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			count("add")
			if u := asUnstructured(obj); u != nil {
				changed(u)
			}
		},
		UpdateFunc: func(old, obj any) {
			count("update")
			o, n := asUnstructured(old), asUnstructured(obj)
			if o != nil && n != nil && fleetOf(o) != fleetOf(n) {
				changed(o)
			}
			if n != nil {
				changed(n)
			}
		},
		DeleteFunc: func(obj any) {
			count("delete")
			u := asUnstructured(obj)
			switch {
			case u == nil:
			case gone != nil:
				gone(u)
			default:
				changed(u)
			}
		},
	}
}

// project publishes the fleet at key (namespace/name) as the caches hold
// it, with its sets and autoscalers; nothing when the fleet is not there.
func (j *joiner) project(inf *nsInformers, key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	obj, exists, err := inf.fleets.GetStore().GetByKey(key)
	if err != nil || !exists {
		return
	}
	u := obj.(*unstructured.Unstructured)
	k, s, err := j.cfg.Projection.Project(j.cfg.Cluster, u)
	if err == nil {
		err = k.Validate()
	}
	if err == nil {
		err = j.join(inf, key, u, &s)
	}
	if err != nil {
		j.m.Invalid.Inc()
		j.log.Error("fleet not published: its state is invalid", logging.KeyFleet, key, logging.KeyError, err.Error())
		return
	}
	fitted, ok := fleet.Fit(s)
	if !ok {
		j.m.Invalid.Inc()
		j.log.Error("fleet not published: its state is invalid even reduced", logging.KeyFleet, k.DocID(), logging.KeyError, s.Validate().Error())
		return
	}
	if fitted.Degraded != "" {
		j.m.Degraded.Inc()
		j.log.Error("fleet published degraded: parts of its state dropped to fit", logging.KeyFleet, k.DocID(), logging.KeyReason, fitted.Degraded)
	}
	// What an optional source that does not list would add is unknown,
	// and said to be (the source logged why, once).
	var unknown []string
	for _, src := range []*source{inf.setsSource, inf.scalersSource} {
		if src != nil && src.unavailable() != nil {
			unknown = append(unknown, fmt.Sprintf("%s unknown (cannot list %s)", src.what, src.resource))
		}
	}
	if len(unknown) > 0 {
		fitted = fleet.Degrade(fitted, strings.Join(unknown, ", "))
	}
	j.agent.Upsert(k, fitted)
}

// projectAll projects every fleet of inf again: an optional source lists
// at last.
func (j *joiner) projectAll(inf *nsInformers) {
	for _, key := range inf.fleets.GetStore().ListKeys() {
		j.project(inf, key)
	}
}

// join adds the fleet's rollout and autoscalers to s, those of sources
// that list.
func (j *joiner) join(inf *nsInformers, key string, u *unstructured.Unstructured, s *fleet.State) error {
	if inf.setsSource != nil && inf.setsSource.unavailable() != nil {
		return j.joinScalers(inf, key, s)
	}
	sets, err := inf.sets.GetIndexer().ByIndex(byFleet, key)
	if err != nil {
		return err
	}
	var projected []fleet.GameServerSet
	for _, obj := range sets {
		set, err := projectSet(obj.(*unstructured.Unstructured), templateHashOf(u))
		if err != nil {
			return err
		}
		projected = append(projected, set)
	}
	if len(projected) > 0 {
		s.Rollout = fleet.RolloutOf(s.Spec.Replicas, projected)
	}
	return j.joinScalers(inf, key, s)
}

// joinScalers adds the fleet's autoscalers to s, if they list.
func (j *joiner) joinScalers(inf *nsInformers, key string, s *fleet.State) error {
	if inf.scalersSource != nil && inf.scalersSource.unavailable() != nil {
		return nil
	}
	scalers, err := inf.scalers.GetIndexer().ByIndex(byFleet, key)
	if err != nil {
		return err
	}
	for _, obj := range scalers {
		a, err := projectAutoscaler(obj.(*unstructured.Unstructured))
		if err != nil {
			return err
		}
		s.Autoscalers = append(s.Autoscalers, a)
	}
	slices.SortFunc(s.Autoscalers, func(a, b fleet.Autoscaler) int { return strings.Compare(a.Name, b.Name) })
	return nil
}

func (j *joiner) delete(u *unstructured.Unstructured) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.agent.Delete(fleet.Key{Cluster: j.cfg.Cluster, Namespace: u.GetNamespace(), Name: u.GetName()})
}

// recount updates the misconfigured autoscaler gauges once the caches
// synced (before, fleets may just not be listed yet).
func (j *joiner) recount() {
	j.mu.Lock()
	synced := j.synced
	j.mu.Unlock()
	if synced {
		j.countMisconfigured()
	}
}

// countMisconfigured counts, and logs, the autoscalers targeting a fleet
// this publisher does not watch (missing, or outside --label-selector) and
// the fleets more than one autoscaler targets: Agones lets them fight.
func (j *joiner) countMisconfigured() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.synced = true
	orphans, shared := 0, 0
	misconfigured := map[string]bool{}
	for _, inf := range j.informers {
		targets := map[string][]string{}
		for _, obj := range inf.scalers.GetStore().List() {
			u := obj.(*unstructured.Unstructured)
			key := u.GetNamespace() + "/" + autoscalerTarget(u)
			targets[key] = append(targets[key], u.GetName())
		}
		for key, names := range targets {
			slices.Sort(names)
			_, exists, _ := inf.fleets.GetStore().GetByKey(key)
			switch {
			case !exists:
				orphans += len(names)
				if !j.reported[key] {
					j.log.Warn("fleetautoscalers target a fleet that is not published (missing, or outside --label-selector)", logging.KeyFleet, key, "autoscalers", names)
				}
			case len(names) > 1:
				shared++
				if !j.reported[key] {
					j.log.Warn("several fleetautoscalers target one fleet; its state lists them all", logging.KeyFleet, key, "autoscalers", names)
				}
			default:
				continue
			}
			misconfigured[key] = true
		}
	}
	// Each problem is logged when it appears, not at every recount.
	j.reported = misconfigured
	j.m.OrphanAutoscalers.Set(float64(orphans))
	j.m.SharedFleets.Set(float64(shared))
}

// trimManagedFields drops managedFields before an object is cached.
func trimManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
	}
	return obj, nil
}
