// Package schemas holds fleetcast's contracts: the Avro schema of the
// Pub/Sub fleet events and the JSON Schema of the Firestore documents. They
// are embedded so that Terraform's inputs, the tests and the code read the
// same bytes; contract tests tie them to the Go types in package fleet.
package schemas

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// FleetEventAvro is the Avro schema (JSON encoding on the wire) of every
// message on the fleet events topic.
//
//go:embed fleet_event.avsc
var FleetEventAvro []byte

//go:embed revisions/fleet_event.*.avsc
var revisions embed.FS

// FleetEventRevisions returns every revision of the fleet event schema,
// oldest first, ending with FleetEventAvro. Pub/Sub validates a message
// against each revision its topic's schema holds, so a topic that holds
// them all accepts the events of every publisher release: clusters upgrade
// one at a time. revisions/fleet_event.N.avsc is revision N; a change to
// fleet_event.avsc freezes the current one there first, and only adds
// fields with defaults (schemas' contract tests check both).
func FleetEventRevisions() ([][]byte, error) {
	names, err := fs.Glob(revisions, "revisions/fleet_event.*.avsc")
	if err != nil {
		return nil, err
	}
	type rev struct {
		n    int
		name string
	}
	var revs []rev
	for _, name := range names {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "revisions/fleet_event."), ".avsc"))
		if err != nil {
			return nil, fmt.Errorf("schema revision file %s: not fleet_event.N.avsc", name)
		}
		revs = append(revs, rev{n, name})
	}
	slices.SortFunc(revs, func(a, b rev) int { return a.n - b.n })
	out := make([][]byte, 0, len(revs)+1)
	for i, r := range revs {
		if r.n != i+1 {
			return nil, fmt.Errorf("schema revisions: want fleet_event.%d.avsc, found %s", i+1, r.name)
		}
		b, err := revisions.ReadFile(r.name)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return append(out, FleetEventAvro), nil
}

// FleetDocumentJSONSchema is the JSON Schema (2020-12) of the Firestore
// documents, with definitions #/$defs/fleet and #/$defs/cluster.
//
//go:embed fleet_document.schema.json
var FleetDocumentJSONSchema []byte

// QueryAPIOpenAPI is the OpenAPI 3.1 description of the QueryFleets HTTP
// API.
//
//go:embed query_api.openapi.yaml
var QueryAPIOpenAPI []byte
