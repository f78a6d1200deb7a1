package fleetmetrics

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/prometheus/common/expfmt"
)

// gzipped is the fleets' families in one format, compressed once for every
// scrape of their version: a gzip header (RFC 1952) and deflate blocks
// that end byte-aligned (a sync flush), so that a scrape's own blocks
// (the clusters' families) can follow them in the same member; and the
// CRC-32 and length of what they hold, which the member's trailer
// continues.
type gzipped struct {
	prefix []byte
	crc    uint32
	size   uint32
}

// gzipHeader is a member's header: no name, no time, no flags; "unknown"
// operating system.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}

// flateWriters recycles the compressors of each scrape's own blocks.
var flateWriters = sync.Pool{New: func() any {
	fw, _ := flate.NewWriter(io.Discard, flate.BestSpeed) // a valid level: no error
	return fw
}}

// gzipped returns the fleets' families in format, gzipped as a prefix of
// a member, compressing them the first time.
func (s *fleets) gzipped(format expfmt.Format) (*gzipped, error) {
	plain, err := s.encode(format)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.zipped[format]; ok {
		return g, nil
	}
	var buf bytes.Buffer
	buf.Write(gzipHeader)
	fw := flateWriters.Get().(*flate.Writer)
	defer flateWriters.Put(fw)
	fw.Reset(&buf)
	if _, err := fw.Write(plain); err != nil {
		return nil, err
	}
	if err := fw.Flush(); err != nil { // ends byte-aligned, not final
		return nil, err
	}
	g := &gzipped{prefix: buf.Bytes(), crc: crc32.ChecksumIEEE(plain), size: uint32(len(plain))}
	if s.zipped == nil {
		s.zipped = map[expfmt.Format]*gzipped{}
	}
	s.zipped[format] = g
	return g, nil
}

// Gzip returns the snapshot in format (one expfmt.Negotiate chose) as one
// gzip member, in parts to write in order. The fleets' families are
// compressed once per version and format, and shared by every scrape of
// it: only the clusters' families are compressed each time, which makes a
// scrape of 10 000 fleets cost a copy rather than a compression of
// megabytes. The parts are shared: never change them.
func (s *Snapshot) Gzip(format expfmt.Format) ([][]byte, error) {
	g, err := s.fleets.gzipped(format)
	if err != nil {
		return nil, err
	}
	var plain bytes.Buffer
	if err := encode(&plain, format, s.clusterFamilies(), true); err != nil {
		return nil, err
	}
	var rest bytes.Buffer
	fw := flateWriters.Get().(*flate.Writer)
	defer flateWriters.Put(fw)
	fw.Reset(&rest)
	if _, err := fw.Write(plain.Bytes()); err != nil {
		return nil, err
	}
	if err := fw.Close(); err != nil { // the final block
		return nil, err
	}
	rest.Write(binary.LittleEndian.AppendUint32(nil, crc32.Update(g.crc, crc32.IEEETable, plain.Bytes())))
	rest.Write(binary.LittleEndian.AppendUint32(nil, g.size+uint32(plain.Len()))) // ISIZE: the length modulo 2³²
	return [][]byte{g.prefix, rest.Bytes()}, nil
}
