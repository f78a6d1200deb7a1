// Package schemas holds fleetcast's contracts: the Avro schema of the
// Pub/Sub fleet events and the JSON Schema of the Firestore documents. They
// are embedded so that Terraform's inputs, the tests and the code read the
// same bytes; contract tests tie them to the Go types in package fleet.
package schemas

import _ "embed"

// FleetEventAvro is the Avro schema (JSON encoding on the wire) of every
// message on the fleet events topic.
//
//go:embed fleet_event.avsc
var FleetEventAvro []byte

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
