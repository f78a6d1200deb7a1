package fleetapi

import (
	"cmp"
	"container/heap"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetview"
)

// Limits of a query.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// MaxClusters is the most clusters one query or watch names: the
	// limit of Firestore's "in" filter, which fleetwatch's listener uses.
	MaxClusters = 30
	// MaxSelectorBytes bounds a label selector (of fleets, or of
	// clusters in a placement policy's rule): room for ten requirements
	// on the longest key and value Kubernetes allows (317 and 63 bytes),
	// far more than a matchmaker writes, and within the request line the
	// proxies in front of the API pass (8 KiB at most for many).
	MaxSelectorBytes = 4096
	// MaxSelectorRequirements bounds a selector's requirements (terms
	// separated by commas): each is evaluated on every fleet a query
	// scans, so a selector costs its caller at most this many label
	// lookups a fleet. Kubernetes' own selectors (a Deployment's, a
	// Service's) hold a handful.
	MaxSelectorRequirements = 64
)

// ParseSelector reads a label selector in Kubernetes' syntax
// (k8s.io/apimachinery/pkg/labels), refusing one over MaxSelectorBytes or
// MaxSelectorRequirements before any work is done with it: one reader's
// selector may cost that reader, never the others.
func ParseSelector(s string) (labels.Selector, error) {
	// Bounded before parsing, so that the parse itself is bounded.
	if err := boundSelector(s); err != nil {
		return nil, err
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	if reqs, _ := sel.Requirements(); len(reqs) > MaxSelectorRequirements {
		return nil, fmt.Errorf("%d requirements: a selector has at most %d (MaxSelectorRequirements)", len(reqs), MaxSelectorRequirements)
	}
	return compile(sel), nil
}

// boundSelector refuses a selector over MaxSelectorBytes or
// MaxSelectorRequirements, from a scan of its bytes.
func boundSelector(s string) error {
	if len(s) > MaxSelectorBytes {
		return fmt.Errorf("%d bytes: a selector is at most %d bytes (MaxSelectorBytes)", len(s), MaxSelectorBytes)
	}
	if n := countRequirements(s); n > MaxSelectorRequirements {
		return fmt.Errorf("%d requirements: a selector has at most %d (MaxSelectorRequirements)", n, MaxSelectorRequirements)
	}
	return nil
}

// CheckBounds refuses the parameters of a list, a watch or a placement
// whose selectors or policy are past the bounds ParseQuery and ParsePlace
// enforce (MaxSelectorBytes, MaxSelectorRequirements, MaxPolicyRules),
// with the error they would give, from a scan of their bytes: it parses
// nothing. A server calls it before it waits for a heavy read's slot
// (Service.Admit), so that such a request is refused at once, and parses
// the rest in the slot: parsing the largest legal policy (MaxPolicyRules
// selectors of MaxSelectorRequirements) is work in proportion to what the
// caller asks, as its answer is, and is to delay no one else.
func CheckBounds(v url.Values) error {
	for _, s := range v["selector"] {
		if err := boundSelector(s); err != nil {
			return paramErr("selector", "%v", err)
		}
	}
	rules := v["policy"]
	if err := boundRules(len(rules)); err != nil {
		return paramErr("policy", "%v", err)
	}
	for _, s := range rules {
		sel, _, _ := strings.Cut(s, ":")
		if err := boundSelector(sel); err != nil {
			return paramErr("policy", "%q: the cluster selector: %v", s, err)
		}
	}
	return nil
}

// countRequirements counts the commas of s outside parentheses (those
// separate the values of an in or notin set), plus one.
func countRequirements(s string) int {
	n, depth := 1, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth = max(0, depth-1)
		case ',':
			if depth == 0 {
				n++
			}
		}
	}
	return n
}

// Orderings of a fleet list.
const (
	OrderByName      = "name"      // cluster, namespace, name ascending
	OrderByReady     = "ready"     // most ready replicas first
	OrderByAvailable = "available" // most available capacity of the counter (or list) first
)

// Query is a validated fleet list query.
type Query struct {
	Clusters     []string
	Namespace    string
	Selector     labels.Selector
	MinReady     int64
	Counter      string // with MinAvailable: at least that much available in the counter
	MinAvailable int64
	List         string // with MinListAvailable
	MinListAvail int64
	// RolloutComplete, when set, keeps the fleets whose rollout is known
	// and complete (true) or known and in progress (false).
	RolloutComplete *bool
	IncludeStale    bool
	OrderBy         string
	PageSize        int
	// After is the position of the last item of the previous page.
	After *Cursor
}

var knownParams = map[string]bool{
	"cluster": true, "namespace": true, "selector": true, "minReady": true, "counter": true, "minAvailable": true,
	"list": true, "minListAvailable": true, "rolloutComplete": true, "includeStale": true, "orderBy": true, "pageSize": true, "pageToken": true,
}

// ParseQuery reads the parameters of GET /v1/fleets.
func ParseQuery(v url.Values) (Query, error) {
	for name := range v {
		if !knownParams[name] {
			if name == "" {
				return Query{}, paramErr("(empty)", "a parameter without a name")
			}
			return Query{}, paramErr(name, "unknown parameter")
		}
	}
	q := NewQuery()
	for _, c := range v["cluster"] {
		if err := ValidateClusterName(c); err != nil {
			return Query{}, err
		}
		if !slices.Contains(q.Clusters, c) {
			q.Clusters = append(q.Clusters, c)
		}
	}
	if len(q.Clusters) > MaxClusters {
		return Query{}, paramErr("cluster", "at most %d clusters per query", MaxClusters)
	}
	if ns, err := single(v, "namespace"); err != nil {
		return Query{}, err
	} else if ns != "" {
		if err := (fleet.FleetRef{Namespace: ns, Name: "x"}).Validate(); err != nil {
			return Query{}, paramErr("namespace", "%q is not a namespace name", ns)
		}
		q.Namespace = ns
	}
	if s, err := single(v, "selector"); err != nil {
		return Query{}, err
	} else if s != "" {
		sel, err := ParseSelector(s)
		if err != nil {
			return Query{}, paramErr("selector", "%v", err)
		}
		q.Selector = sel
	}
	var err error
	if q.MinReady, err = nonNegative(v, "minReady"); err != nil {
		return Query{}, err
	}
	if q.Counter, q.MinAvailable, err = threshold(v, "counter", "minAvailable"); err != nil {
		return Query{}, err
	}
	if q.List, q.MinListAvail, err = threshold(v, "list", "minListAvailable"); err != nil {
		return Query{}, err
	}
	if s, err := single(v, "rolloutComplete"); err != nil {
		return Query{}, err
	} else if s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return Query{}, paramErr("rolloutComplete", "%q: want true or false", s)
		}
		q.RolloutComplete = &b
	}
	if s, err := single(v, "includeStale"); err != nil {
		return Query{}, err
	} else if s != "" {
		if q.IncludeStale, err = strconv.ParseBool(s); err != nil {
			return Query{}, paramErr("includeStale", "%q: want true or false", s)
		}
	}
	if s, err := single(v, "orderBy"); err != nil {
		return Query{}, err
	} else if s != "" {
		switch s {
		case OrderByName, OrderByReady:
		case OrderByAvailable:
			if q.Counter == "" && q.List == "" {
				return Query{}, paramErr("orderBy", "available needs a counter or list parameter")
			}
		default:
			return Query{}, paramErr("orderBy", "%q: want name, ready or available", s)
		}
		q.OrderBy = s
	}
	if s, err := single(v, "pageSize"); err != nil {
		return Query{}, err
	} else if s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return Query{}, paramErr("pageSize", "%q: want an integer from 1 to %d", s, MaxPageSize)
		}
		q.PageSize = n
	}
	if s, err := single(v, "pageToken"); err != nil {
		return Query{}, err
	} else if s != "" {
		if q, err = q.Next(s); err != nil {
			return Query{}, err
		}
	}
	return q, nil
}

// Next returns the query of the page after the one that returned token.
func (q Query) Next(token string) (Query, error) {
	c, err := decodeCursor(token)
	if err != nil || c.Query != q.fingerprint() {
		return Query{}, paramErr("pageToken", "not a token of this query; start again without it")
	}
	q.After = &c
	return q, nil
}

// Values returns q as the parameters of GET /v1/fleets: ParseQuery of them
// gives q back.
func (q Query) Values() url.Values {
	v := url.Values{}
	for _, c := range q.Clusters {
		v.Add("cluster", c)
	}
	set := func(name, value string, given bool) {
		if given {
			v.Set(name, value)
		}
	}
	set("namespace", q.Namespace, q.Namespace != "")
	if q.Selector != nil && !q.Selector.Empty() {
		v.Set("selector", q.Selector.String())
	}
	set("minReady", strconv.FormatInt(q.MinReady, 10), q.MinReady != 0)
	set("counter", q.Counter, q.Counter != "")
	set("minAvailable", strconv.FormatInt(q.MinAvailable, 10), q.Counter != "" && q.MinAvailable != 0)
	set("list", q.List, q.List != "")
	set("minListAvailable", strconv.FormatInt(q.MinListAvail, 10), q.List != "" && q.MinListAvail != 0)
	if q.RolloutComplete != nil {
		v.Set("rolloutComplete", strconv.FormatBool(*q.RolloutComplete))
	}
	set("includeStale", "true", q.IncludeStale)
	set("orderBy", q.OrderBy, q.OrderBy != "" && q.OrderBy != OrderByName)
	set("pageSize", strconv.Itoa(q.PageSize), q.PageSize != 0 && q.PageSize != DefaultPageSize)
	if q.After != nil {
		v.Set("pageToken", q.After.encode())
	}
	return v
}

func single(v url.Values, name string) (string, error) {
	switch vals := v[name]; len(vals) {
	case 0:
		return "", nil
	case 1:
		return vals[0], nil
	default:
		return "", paramErr(name, "given %d times; give it once", len(vals))
	}
}

func nonNegative(v url.Values, name string) (int64, error) {
	s, err := single(v, name)
	if err != nil || s == "" {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, paramErr(name, "%q: want a non-negative integer", s)
	}
	return n, nil
}

// threshold reads a key parameter and its minimum (both or neither).
func threshold(v url.Values, keyParam, minParam string) (string, int64, error) {
	key, err := single(v, keyParam)
	if err != nil {
		return "", 0, err
	}
	min, err := nonNegative(v, minParam)
	if err != nil {
		return "", 0, err
	}
	if _, given := v[minParam]; given && key == "" {
		return "", 0, paramErr(minParam, "needs %s, the key it applies to", keyParam)
	}
	if key != "" && (len(key) > fleet.MaxAggregateKey || strings.TrimSpace(key) == "") {
		return "", 0, paramErr(keyParam, "%q is not a %s key", key, keyParam)
	}
	return key, min, nil
}

// Matches applies every filter of q to a live document; stale says whether
// its cluster's heartbeat is too old.
func (q Query) Matches(d *fleet.Document, stale bool) bool {
	if d.Deleted || (stale && !q.IncludeStale) {
		return false
	}
	if len(q.Clusters) > 0 && !slices.Contains(q.Clusters, d.Cluster) {
		return false
	}
	if q.Namespace != "" && d.Namespace != q.Namespace {
		return false
	}
	if !q.Selector.Matches(labels.Set(d.Labels)) {
		return false
	}
	st := d.Status
	if st == nil {
		st = &fleet.DocStatus{}
	}
	if st.ReadyReplicas < q.MinReady {
		return false
	}
	if q.Counter != "" {
		c, ok := st.Counters[q.Counter]
		if !ok || c.Available < q.MinAvailable {
			return false
		}
	}
	if q.List != "" {
		l, ok := st.Lists[q.List]
		if !ok || l.Available < q.MinListAvail {
			return false
		}
	}
	if q.RolloutComplete != nil && (d.Rollout == nil || d.Rollout.Complete != *q.RolloutComplete) {
		return false
	}
	return true
}

// Cursor is the position after which the next page starts, bound to the
// query it belongs to.
type Cursor struct {
	Query string `json:"q"`
	Key   int64  `json:"k"`
	ID    string `json:"id"`
}

func decodeCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, err
	}
	var c Cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return Cursor{}, err
	}
	return c, nil
}

func (c Cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// fingerprint identifies the query a page token belongs to: every
// parameter but the page size and token.
func (q Query) fingerprint() string {
	sel := ""
	if q.Selector != nil {
		sel = q.Selector.String()
	}
	rollout := "any"
	if q.RolloutComplete != nil {
		rollout = strconv.FormatBool(*q.RolloutComplete)
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%v|%s|%s|%d|%s|%d|%s|%d|%t|%s|%s", q.Clusters, q.Namespace, sel, q.MinReady,
		q.Counter, q.MinAvailable, q.List, q.MinListAvail, q.IncludeStale, q.OrderBy, rollout))
	return hex.EncodeToString(h[:8])
}

// key identifies the answer to q: every parameter, the page size and
// position included.
func (q Query) key() string {
	after := ""
	if q.After != nil {
		after = q.After.encode()
	}
	return fmt.Sprintf("%s|%d|%s", q.fingerprint(), q.PageSize, after)
}

// sortKey is the primary ordering value of a document under q (larger
// first), 0 for ordering by name.
func (q Query) sortKey(d *fleet.Document) int64 {
	if d.Status == nil {
		return 0
	}
	return q.sortKeyOf(d.Status.ReadyReplicas, d.Status.Counters, d.Status.Lists)
}

// sortKeyOf is sortKey of a fleet's ready game servers, counters and
// lists, as a document or an answer (Fleet) holds them.
func (q Query) sortKeyOf(ready int64, counters, lists map[string]fleet.DocAggregate) int64 {
	switch q.OrderBy {
	case OrderByReady:
		return ready
	case OrderByAvailable:
		if q.Counter != "" {
			return counters[q.Counter].Available
		}
		return lists[q.List].Available
	}
	return 0
}

// item is a fleet of an answer, with its document ID.
type item struct {
	id  string
	doc *fleet.Document
}

// compare orders items for q: by the sort key descending, then by
// document ID, which is (cluster, namespace, name) order.
func (q Query) compare(a, b item) int {
	return cmp.Or(cmp.Compare(q.sortKey(b.doc), q.sortKey(a.doc)), strings.Compare(a.id, b.id))
}

// afterCursor reports whether e comes after the position q.After.
func (q Query) afterCursor(e item) bool {
	c := q.After
	return c == nil || cmp.Or(cmp.Compare(c.Key, q.sortKey(e.doc)), strings.Compare(e.id, c.ID)) > 0
}

// pager collects one page while the matching entries stream past it, in
// any order: it keeps the PageSize first (in q's order) after the cursor
// in a heap whose top is the last of them, so a request holds no more
// than its page however many fleets match.
type pager struct {
	q     Query
	top   []item // a max-heap under q.compare
	total int    // entries matched
	after int    // of those, after the cursor
}

func (p *pager) add(e item) {
	p.total++
	if !p.q.afterCursor(e) {
		return
	}
	p.after++
	switch {
	case len(p.top) < p.q.PageSize:
		heap.Push(p, e)
	case p.q.compare(e, p.top[0]) < 0:
		p.top[0] = e
		heap.Fix(p, 0)
	}
}

// page returns the page in q's order and the token of the next page ("" on
// the last).
func (p *pager) page() ([]item, string) {
	page := slices.SortedFunc(slices.Values(p.top), p.q.compare)
	if p.after <= len(page) {
		return page, ""
	}
	last := page[len(page)-1]
	return page, Cursor{Query: p.q.fingerprint(), Key: p.q.sortKey(last.doc), ID: last.id}.encode()
}

func (p *pager) Len() int           { return len(p.top) }
func (p *pager) Less(i, j int) bool { return p.q.compare(p.top[i], p.top[j]) > 0 }
func (p *pager) Swap(i, j int)      { p.top[i], p.top[j] = p.top[j], p.top[i] }
func (p *pager) Push(x any)         { p.top = append(p.top, x.(item)) }
func (p *pager) Pop() any {
	e := p.top[len(p.top)-1]
	p.top = p.top[:len(p.top)-1]
	return e
}

// IsStale reports whether a cluster's last heartbeat was ingested more than
// staleAfter before now (or it never sent one): fleetview.IsStale.
func IsStale(c *fleet.ClusterDocument, now time.Time, staleAfter time.Duration) bool {
	return fleetview.IsStale(c, now, staleAfter)
}

// HasCluster reports whether a watch of q hears of cluster: every cluster,
// unless q names some.
func (q Query) HasCluster(name string) bool {
	return len(q.Clusters) == 0 || slices.Contains(q.Clusters, name)
}
