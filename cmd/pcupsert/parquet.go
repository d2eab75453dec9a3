package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert/ndjson"
)

// parquetRow is a row of Pinecone's import layout: the columns id,
// values, sparse_values and metadata (a JSON object as a string), the
// last two optional.
type parquetRow struct {
	ID           string         `parquet:"id" json:"id"`
	Values       []float32      `parquet:"values,list" json:"values,omitempty"`
	SparseValues *parquetSparse `parquet:"sparse_values,optional" json:"sparse_values,omitempty"`
	Metadata     *string        `parquet:"metadata,optional" json:"metadata,omitempty"`
}

type parquetSparse struct {
	Indices []uint32  `parquet:"indices,list" json:"indices"`
	Values  []float32 `parquet:"values,list" json:"values"`
}

// parquetBatch is how many rows a parquetSource decodes at a time.
const parquetBatch = 256

// parquetSource reads the rows of a Parquet file in Pinecone's import
// layout. A file whose schema cannot be read as that layout fails when it
// is opened.
type parquetSource struct {
	r     *parquet.GenericReader[parquetRow]
	total int64
	rows  []parquetRow
	at    int   // next row of rows
	n     int   // rows in rows
	row   int   // rows returned so far; the row number of the last one
	err   error // the reader's error, once rows is used up
}

func newParquetSource(f io.ReaderAt, size int64) (*parquetSource, error) {
	file, err := parquet.OpenFile(f, size)
	if err != nil {
		return nil, err
	}
	columns := map[string]bool{}
	for _, f := range file.Schema().Fields() {
		columns[f.Name()] = true
	}
	switch {
	case !columns["id"]:
		return nil, errors.New(`not Pinecone's import layout: no "id" column`)
	case !columns["values"] && !columns["sparse_values"]:
		return nil, errors.New(`not Pinecone's import layout: no "values" or "sparse_values" column`)
	}
	return &parquetSource{r: parquet.NewGenericReader[parquetRow](file), total: file.NumRows(), rows: make([]parquetRow, parquetBatch)}, nil
}

func (s *parquetSource) next() (*pinecone.Vector, *badEntry, error) {
	if s.at == s.n {
		if s.err != nil {
			return nil, nil, s.err
		}
		clear(s.rows)
		s.n, s.err = s.r.Read(s.rows)
		s.at = 0
		if s.n == 0 {
			if s.err == nil {
				s.err = io.EOF
			}
			return nil, nil, s.err
		}
	}
	row := &s.rows[s.at]
	s.at++
	s.row++
	v, err := row.vector()
	if err != nil {
		raw, _ := json.Marshal(row)
		return nil, &badEntry{pos: s.row, raw: raw, err: fmt.Errorf("row %d%s: %w", s.row, idNote(row.ID), err)}, nil
	}
	return v, nil, nil
}

func idNote(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf(" (id %q)", id)
}

// vector returns the row as a record, or what makes it none.
func (row *parquetRow) vector() (*pinecone.Vector, error) {
	if row.ID == "" {
		return nil, ndjson.ErrMissingID
	}
	v := &pinecone.Vector{Id: row.ID}
	if len(row.Values) > 0 {
		vals := row.Values
		v.Values = &vals
	}
	if sv := row.SparseValues; sv != nil {
		v.SparseValues = &pinecone.SparseValues{Indices: sv.Indices, Values: sv.Values}
	}
	if row.Metadata != nil && *row.Metadata != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(*row.Metadata), &m); err != nil || m == nil {
			return nil, fmt.Errorf("%w: column \"metadata\" is not a JSON object", ndjson.ErrWrongType)
		}
		md, err := structpb.NewStruct(m)
		if err != nil {
			return nil, fmt.Errorf("%w: metadata cannot be represented as a protobuf Struct", ndjson.ErrWrongType)
		}
		v.Metadata = md
	}
	return v, nil
}

func (s *parquetSource) pos() int { return s.row }

func (s *parquetSource) consumed() float64 {
	if s.total <= 0 {
		return 1
	}
	return float64(s.row) / float64(s.total)
}
