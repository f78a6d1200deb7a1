// Package fleetapi is fleetcast's read model, independent of HTTP: the
// query parameters and their parsing, matching, ordering, pages and page
// tokens, the answer shapes of schemas/query_api.openapi.yaml, one error
// type, and the Service that answers from an in-memory view of the live
// fleets and clusters. Its HTTP client is package fleetclient, so that a
// program wanting fleetapi.Fleet links no HTTP client or Google
// credentials.
//
// The view costs what changed, not what matched: a Service reads every
// live fleet and cluster once, then, before each answer, only the
// documents written since its previous read (firestoredb stamps every
// write with Firestore's commit time, tombstones included). Filtering,
// ordering, pages and ETags are computed on the view.
//
// The view also records its changes in a bounded feed, which every Watch
// of the Service follows: a watch of any filter, over any protocol, costs
// no read of its own.
package fleetapi
