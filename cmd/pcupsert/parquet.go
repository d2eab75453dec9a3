package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
	"github.com/pinecone-io/go-pinecone/v5/pinecone"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/upsertlib/upsert/ndjson"
)

// A Parquet file in Pinecone's import layout has the columns
//
//   - id: a string;
//   - values: a list of numbers (list<float> as a rule), optional;
//   - sparse_values: a struct of "indices", a list of integers (list<uint32>
//     or list<int64>), and "values", a list of numbers, optional;
//   - metadata: a JSON object as a string, or a struct whose fields are
//     the metadata's (strings, numbers, booleans or lists of strings),
//     optional.
//
// Lists may be in the three-level LIST layout (what pyarrow and
// parquet-go write) or the legacy ones; other columns are ignored. A file
// whose columns are not of these types is refused when it is opened, naming
// the column, its type and the type wanted: no row of it could be read.
//
// A column, or a field of a struct "metadata" column, of Parquet's NULL
// type (what pyarrow writes for a column of None alone) is null in every
// row: "values", "sparse_values" and "metadata" are then absent from every
// row, and the field a key no row has. A list of NULL (list<null>, what
// pyarrow makes of lists all empty) is a list of the type wanted: an empty
// list is an empty list, and an element of it a null element.
//
// A row is a bad row, named by its number with the rule it breaks, when
// its id is null or empty, an element of one of its lists is null (pyarrow
// writes list elements as nullable), a sparse index is negative or larger
// than a uint32, a number does not fit a float32, or its "metadata" string
// is not a JSON object, or is one that NDJSON metadata could not be (a
// string in it that is not valid Unicode: see ndjson.DecodeMetadata). A null
// struct field of a struct "metadata" column is a key the row does not
// have (pyarrow writes a key missing from a row's dict as null), not a
// null metadata value.

// parquetBatch is how many rows a parquetSource reads at a time.
const parquetBatch = 256

// parquetSource reads the rows of a Parquet file in Pinecone's import
// layout. A file whose schema cannot be read as that layout fails when it
// is opened.
type parquetSource struct {
	r      *parquet.GenericReader[any] // rows as the file's schema has them
	layout *parquetLayout
	total  int64
	rows   []parquet.Row
	cols   [][]parquet.Value // the values of a row, by leaf column
	at     int               // next row of rows
	n      int               // rows in rows
	row    int               // rows returned so far; the row number of the last one
	err    error             // the reader's error, once rows is used up
	// firstGroup are the column chunks of the first row group, whose
	// starts identify the file to a checkpoint (parquetTail); nil for a
	// file without rows.
	firstGroup []format.ColumnChunk
}

func newParquetSource(f io.ReaderAt, size int64) (*parquetSource, error) {
	file, err := parquet.OpenFile(f, size)
	if err != nil {
		return nil, err
	}
	layout, err := layoutOf(file.Root())
	if err != nil {
		return nil, fmt.Errorf("not Pinecone's import layout: %w", err)
	}
	src := &parquetSource{
		r:      parquet.NewGenericReader[any](file),
		layout: layout,
		total:  file.NumRows(),
		rows:   make([]parquet.Row, parquetBatch),
		cols:   make([][]parquet.Value, len(file.Schema().Columns())),
	}
	if groups := file.Metadata().RowGroups; len(groups) > 0 {
		src.firstGroup = groups[0].Columns
	}
	return src, nil
}

func (s *parquetSource) next() (*pinecone.Vector, *badEntry, error) {
	if s.at == s.n {
		if s.err != nil {
			return nil, nil, s.err
		}
		s.n, s.err = s.r.ReadRows(s.rows)
		s.at = 0
		if s.n == 0 {
			if s.err == nil {
				s.err = io.EOF
			}
			return nil, nil, s.err
		}
	}
	clear(s.cols)
	s.rows[s.at].Range(func(column int, values []parquet.Value) bool {
		s.cols[column] = values
		return true
	})
	s.at++
	s.row++
	rec := s.layout.record(s.cols)
	v, err := rec.vector()
	if err != nil {
		raw, _ := json.Marshal(rec) // cannot fail: cells write themselves as JSON
		return nil, &badEntry{pos: s.row, raw: raw, err: fmt.Errorf("row %d%s: %w", s.row, idNote(rec.ID), err)}, nil
	}
	return v, nil, nil
}

func idNote(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf(" (id %q)", id)
}

func (s *parquetSource) pos() int { return s.row }

func (s *parquetSource) consumed() float64 {
	if s.total <= 0 {
		return 1
	}
	return float64(s.row) / float64(s.total)
}

// parquetLayout is where the columns of Pinecone's import layout are in a
// file's schema.
type parquetLayout struct {
	id       *parquet.Column // a string leaf
	values   *listColumn     // nil without a "values" column
	sparse   *sparseColumns  // nil without a "sparse_values" column
	metaJSON *parquet.Column // a "metadata" column of JSON strings, or nil
	metaKeys *structColumn   // a "metadata" struct column, or nil
}

// listColumn is a column that is a list of leaf values.
type listColumn struct {
	name string          // "values", "sparse_values.indices"
	leaf *parquet.Column // the elements' column
	// present is the definition level from which a value of leaf is an
	// element of the list, null or not; below it, the list is empty (at
	// present-1) or null.
	present int
}

// sparseColumns is a "sparse_values" struct column.
type sparseColumns struct {
	defined         int // definition level from which the struct is not null
	indices, values listColumn
}

// structColumn is a "metadata" struct column.
type structColumn struct {
	defined int // definition level from which the struct is not null
	fields  []structField
}

// structField is a field of a "metadata" struct column: a leaf of
// strings, numbers or booleans, or a list of strings.
type structField struct {
	name string
	leaf *parquet.Column // nil for a list
	list *listColumn
}

// Messages naming the types a column of the layout takes.
const (
	wantNumberList  = "want a list of numbers, such as list<float>"
	wantIntegerList = "want a list of integers, such as list<uint32> or list<int64>"
	wantSparse      = `want a struct of "indices", a list of integers such as list<uint32>, and "values", a list of numbers such as list<float>`
	wantMetadata    = "want a JSON object as a string, or a struct"
	wantMetaField   = "a struct metadata column takes strings, numbers, booleans and lists of strings"
)

// layoutOf reads the layout of a file from its schema, root; an error names
// the column that is missing or not of a type the layout takes.
func layoutOf(root *parquet.Column) (*parquetLayout, error) {
	l := &parquetLayout{}
	id := root.Column("id")
	if id == nil {
		return nil, errors.New(`no "id" column`)
	}
	if !isStringLeaf(id) {
		return nil, fmt.Errorf(`column "id" is %s; want a string`, typeName(id))
	}
	l.id = id
	if c := root.Column("values"); c != nil && !isNullLeaf(c) {
		list, ok := listOf("values", c)
		if !ok || !isNumber(list.leaf) && !isNull(list.leaf) {
			return nil, fmt.Errorf(`column "values" is %s; %s`, typeName(c), wantNumberList)
		}
		l.values = list
	}
	if c := root.Column("sparse_values"); c != nil && !isNullLeaf(c) {
		sparse, err := sparseOf(c)
		if err != nil {
			return nil, err
		}
		l.sparse = sparse
	}
	if root.Column("values") == nil && root.Column("sparse_values") == nil {
		return nil, errors.New(`no "values" or "sparse_values" column`)
	}
	if c := root.Column("metadata"); c != nil {
		switch {
		case isNullLeaf(c): // null in every row: no row has metadata
		case isStringLeaf(c) || c.Leaf() && !c.Repeated() && isLogical[*format.JsonType](c):
			l.metaJSON = c
		case isStruct(c):
			keys, err := metadataStructOf(c)
			if err != nil {
				return nil, err
			}
			l.metaKeys = keys
		default:
			return nil, fmt.Errorf(`column "metadata" is %s; %s`, typeName(c), wantMetadata)
		}
	}
	return l, nil
}

func sparseOf(c *parquet.Column) (*sparseColumns, error) {
	indices, values := c.Column("indices"), c.Column("values")
	if !isStruct(c) || len(c.Columns()) != 2 || indices == nil || values == nil {
		return nil, fmt.Errorf(`column "sparse_values" is %s; %s`, typeName(c), wantSparse)
	}
	s := &sparseColumns{defined: c.MaxDefinitionLevel()}
	list, ok := listOf("sparse_values.indices", indices)
	if !ok || !isInteger(list.leaf) && !isNull(list.leaf) {
		return nil, fmt.Errorf(`column "sparse_values.indices" is %s; %s`, typeName(indices), wantIntegerList)
	}
	s.indices = *list
	if list, ok = listOf("sparse_values.values", values); !ok || !isNumber(list.leaf) && !isNull(list.leaf) {
		return nil, fmt.Errorf(`column "sparse_values.values" is %s; %s`, typeName(values), wantNumberList)
	}
	s.values = *list
	return s, nil
}

func metadataStructOf(c *parquet.Column) (*structColumn, error) {
	s := &structColumn{defined: c.MaxDefinitionLevel()}
	for _, f := range c.Columns() {
		name := f.Name()
		switch list, isList := listOf("metadata."+name, f); {
		case isNullLeaf(f): // null in every row: a key no row has
		case isList && (isString(list.leaf) || isNull(list.leaf)):
			s.fields = append(s.fields, structField{name: name, list: list})
		case !f.Leaf() || f.Repeated() || !isStringLeaf(f) && !isNumber(f) && f.Type().Kind() != parquet.Boolean:
			return nil, fmt.Errorf(`column "metadata": field %q is %s; %s`, name, typeName(f), wantMetaField)
		default:
			s.fields = append(s.fields, structField{name: name, leaf: f})
		}
	}
	return s, nil
}

// listOf returns c as a list column named name, if it is a list of leaf
// values: a LIST group holding a repeated group of one leaf (the standard
// layout) or a repeated leaf, or a repeated leaf (the legacy ones).
func listOf(name string, c *parquet.Column) (*listColumn, bool) {
	elem, repeated := listElement(c)
	if elem == nil || !elem.Leaf() || elem != repeated && elem.Repeated() {
		return nil, false
	}
	return &listColumn{name: name, leaf: elem, present: repeated.MaxDefinitionLevel()}, true
}

// listElement returns the element of c, a list, and its repeated node (the
// element itself in the legacy layouts); nil if c is not a list.
func listElement(c *parquet.Column) (elem, repeated *parquet.Column) {
	if c.Repeated() {
		return c, c // a repeated leaf or group: a list of it
	}
	if c.Leaf() || !isLogical[*format.ListType](c) || len(c.Columns()) != 1 {
		return nil, nil
	}
	r := c.Columns()[0]
	switch {
	case !r.Repeated():
		return nil, nil
	case r.Leaf() || len(r.Columns()) != 1:
		return r, r // two-level layout
	default:
		return r.Columns()[0], r // three-level layout
	}
}

// isLogical reports whether the logical type of c is a T.
func isLogical[T format.LogicalTypeValue](c *parquet.Column) bool {
	lt := c.Type().LogicalType()
	if lt == nil {
		return false
	}
	_, ok := lt.Value.(T)
	return ok
}

func hasLogicalType(c *parquet.Column) bool { return c.Type().LogicalType() != nil }

// isNull reports whether c is a leaf of Parquet's NULL type, repeated or
// not: every value of it is null.
func isNull(c *parquet.Column) bool { return c.Leaf() && isLogical[*format.NullType](c) }

// isNullLeaf reports whether c is a leaf of the NULL type, not repeated:
// a column, or a struct field, null in every row.
func isNullLeaf(c *parquet.Column) bool { return !c.Repeated() && isNull(c) }

// isStruct reports whether c is a group that is neither a list nor a map.
func isStruct(c *parquet.Column) bool {
	return !c.Leaf() && !c.Repeated() && !hasLogicalType(c)
}

// isStringLeaf reports whether c is a leaf of strings, not repeated.
func isStringLeaf(c *parquet.Column) bool { return !c.Repeated() && isString(c) }

// isString reports whether c is a leaf of strings, repeated or not.
func isString(c *parquet.Column) bool {
	if !c.Leaf() || c.Type().Kind() != parquet.ByteArray {
		return false
	}
	return !hasLogicalType(c) || isLogical[*format.StringType](c) || isLogical[*format.EnumType](c)
}

// isInteger reports whether c is a leaf of plain integers: not decimals,
// dates or times.
func isInteger(c *parquet.Column) bool {
	if !c.Leaf() {
		return false
	}
	switch c.Type().Kind() {
	case parquet.Int32, parquet.Int64:
		return !hasLogicalType(c) || isLogical[*format.IntType](c)
	}
	return false
}

// isNumber reports whether c is a leaf of floating-point numbers or plain
// integers.
func isNumber(c *parquet.Column) bool {
	if !c.Leaf() {
		return false
	}
	switch c.Type().Kind() {
	case parquet.Float, parquet.Double:
		return !hasLogicalType(c)
	}
	return isInteger(c)
}

// isUnsigned reports whether c is a leaf of unsigned integers.
func isUnsigned(c *parquet.Column) bool {
	if !c.Leaf() || !isLogical[*format.IntType](c) {
		return false
	}
	return !c.Type().LogicalType().Value.(*format.IntType).IsSigned
}

// typeName names the type of column c as pyarrow does: string, float,
// double, int64, list<float>, struct<genre: string>.
func typeName(c *parquet.Column) string {
	switch elem, repeated := listElement(c); elem {
	case nil:
		return valuesTypeName(c)
	case repeated: // a repeated leaf or group: a list of its values
		return "list<" + valuesTypeName(elem) + ">"
	default:
		return "list<" + typeName(elem) + ">"
	}
}

// valuesTypeName names the type of the values of column c, whether or not
// they repeat.
func valuesTypeName(c *parquet.Column) string {
	if !c.Leaf() {
		switch {
		case isLogical[*format.MapType](c):
			return "map"
		case hasLogicalType(c):
			return strings.ToLower(c.Type().LogicalType().String())
		}
		var b strings.Builder
		b.WriteString("struct<")
		for i, f := range c.Columns() {
			if i > 0 {
				b.WriteString(", ")
			}
			if i == 4 {
				b.WriteString("…")
				break
			}
			fmt.Fprintf(&b, "%s: %s", f.Name(), typeName(f))
		}
		b.WriteString(">")
		return b.String()
	}
	if lt := c.Type().LogicalType(); lt != nil {
		switch t := lt.Value.(type) {
		case *format.StringType, *format.EnumType:
			return "string"
		case *format.JsonType:
			return "json"
		case *format.IntType:
			if t.IsSigned {
				return fmt.Sprintf("int%d", t.BitWidth)
			}
			return fmt.Sprintf("uint%d", t.BitWidth)
		case *format.DecimalType:
			return fmt.Sprintf("decimal(%d, %d)", t.Precision, t.Scale)
		case *format.TimestampType:
			return "timestamp"
		case *format.DateType:
			return "date"
		case *format.TimeType:
			return "time"
		}
		return strings.ToLower(lt.String())
	}
	switch k := c.Type().Kind(); k {
	case parquet.Boolean:
		return "bool"
	case parquet.ByteArray:
		return "binary"
	case parquet.FixedLenByteArray:
		return "fixed_size_binary"
	default:
		return strings.ToLower(k.String()) // int32, int64, int96, float, double
	}
}

// parquetRecord is a row as read, before it is checked: a bad row's dead
// letter holds it as JSON.
type parquetRecord struct {
	ID           string               `json:"id"`
	Values       []cell               `json:"values,omitempty"`
	SparseValues *parquetSparseRecord `json:"sparse_values,omitempty"`
	// Metadata is the "metadata" column's string unless "" (a
	// jsonMetadata), or the fields of a struct "metadata" column that are
	// not null: cells and []cell.
	Metadata any `json:"metadata,omitempty"`

	values, indices, sparseVals *listColumn // where the lists come from, for messages
}

type parquetSparseRecord struct {
	Indices []cell `json:"indices"`
	Values  []cell `json:"values"`
}

// cell is a value of a leaf column, which may be null.
type cell struct {
	v        parquet.Value
	unsigned bool // an unsigned integer
}

// MarshalJSON writes c as JSON: null, a boolean, a number, a string, or a
// string for a NaN or infinite number ("NaN", "+Inf").
func (c cell) MarshalJSON() ([]byte, error) {
	v := c.v
	if v.IsNull() {
		return []byte("null"), nil
	}
	switch v.Kind() {
	case parquet.Boolean:
		return strconv.AppendBool(nil, v.Boolean()), nil
	case parquet.Int32, parquet.Int64:
		if c.unsigned {
			return strconv.AppendUint(nil, c.uint64(), 10), nil
		}
		return strconv.AppendInt(nil, c.int64(), 10), nil
	case parquet.Float, parquet.Double:
		f, bits := v.Double(), 64
		if v.Kind() == parquet.Float {
			f, bits = float64(v.Float()), 32
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return json.Marshal(strconv.FormatFloat(f, 'g', -1, bits))
		}
		return strconv.AppendFloat(nil, f, 'g', -1, bits), nil
	default:
		return jsonString(v.ByteArray())
	}
}

// jsonString writes b as a JSON string, keeping a byte that is not UTF-8
// as it is rather than as U+FFFD (as json.Marshal would): a bad row's
// letter then holds the row's exact bytes (raw_base64; see
// ndjson.DeadLetters), so that a replay of it, fixed, lands what the file
// held.
func jsonString(b []byte) ([]byte, error) {
	if utf8.Valid(b) {
		return json.Marshal(string(b))
	}
	out := []byte{'"'}
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = append(out, b[0])
		} else {
			q, _ := json.Marshal(string(b[:size])) // a valid rune: cannot fail
			out = append(out, q[1:len(q)-1]...)
		}
		b = b[size:]
	}
	return append(out, '"'), nil
}

// int64 and uint64 return c, an integer, as either.
func (c cell) int64() int64 {
	if c.v.Kind() == parquet.Int32 {
		return int64(c.v.Int32())
	}
	return c.v.Int64()
}

func (c cell) uint64() uint64 {
	if c.v.Kind() == parquet.Int32 {
		return uint64(c.v.Uint32())
	}
	return c.v.Uint64()
}

// number returns c, a number, as a float64.
func (c cell) number() float64 {
	switch c.v.Kind() {
	case parquet.Float:
		return float64(c.v.Float())
	case parquet.Double:
		return c.v.Double()
	}
	if c.unsigned {
		return float64(c.uint64())
	}
	return float64(c.int64())
}

// record returns the row whose values are cols, by leaf column.
func (l *parquetLayout) record(cols [][]parquet.Value) *parquetRecord {
	rec := &parquetRecord{}
	if v := cols[l.id.Index()][0]; !v.IsNull() {
		rec.ID = string(v.ByteArray())
	}
	if l.values != nil {
		rec.Values, rec.values = l.values.cells(cols, true), l.values
	}
	if s := l.sparse; s != nil && cols[s.indices.leaf.Index()][0].DefinitionLevel() >= s.defined {
		rec.SparseValues = &parquetSparseRecord{Indices: s.indices.cells(cols, false), Values: s.values.cells(cols, false)}
		rec.indices, rec.sparseVals = &s.indices, &s.values
	}
	switch {
	case l.metaJSON != nil:
		if v := cols[l.metaJSON.Index()][0]; !v.IsNull() && len(v.ByteArray()) > 0 {
			rec.Metadata = jsonMetadata(v.ByteArray())
		}
	case l.metaKeys != nil:
		rec.Metadata = l.metaKeys.fieldsOf(cols)
	}
	return rec
}

// cells returns the elements of the list in cols; nil for a null list,
// and for an empty one when emptyIsNil.
func (l *listColumn) cells(cols [][]parquet.Value, emptyIsNil bool) []cell {
	vs := cols[l.leaf.Index()]
	if vs[0].DefinitionLevel() < l.present {
		if emptyIsNil || vs[0].DefinitionLevel() < l.present-1 {
			return nil
		}
		return []cell{}
	}
	unsigned := isUnsigned(l.leaf)
	cells := make([]cell, len(vs))
	for i, v := range vs {
		cells[i] = cell{v, unsigned}
	}
	return cells
}

// fieldsOf returns the fields of the struct in cols that are not null;
// nil for a null struct.
func (s *structColumn) fieldsOf(cols [][]parquet.Value) map[string]any {
	fields := map[string]any{}
	for _, f := range s.fields {
		leaf := f.leaf
		if f.list != nil {
			leaf = f.list.leaf
		}
		first := cols[leaf.Index()][0]
		if first.DefinitionLevel() < s.defined {
			return nil // the struct is null
		}
		switch {
		case f.list != nil:
			if list := f.list.cells(cols, false); list != nil {
				fields[f.name] = list
			}
		case !first.IsNull():
			fields[f.name] = cell{first, isUnsigned(leaf)}
		}
	}
	return fields
}

// vector returns the row as a record, or the rule it breaks.
func (rec *parquetRecord) vector() (*pinecone.Vector, error) {
	if rec.ID == "" {
		return nil, ndjson.ErrMissingID
	}
	v := &pinecone.Vector{Id: rec.ID}
	if len(rec.Values) > 0 {
		vals, err := float32s(rec.values, rec.Values)
		if err != nil {
			return nil, err
		}
		v.Values = &vals
	}
	if sv := rec.SparseValues; sv != nil {
		indices, err := uint32s(rec.indices, sv.Indices)
		if err != nil {
			return nil, err
		}
		vals, err := float32s(rec.sparseVals, sv.Values)
		if err != nil {
			return nil, err
		}
		v.SparseValues = &pinecone.SparseValues{Indices: indices, Values: vals}
	}
	switch md := rec.Metadata.(type) {
	case jsonMetadata:
		obj, ok := md.object()
		if !ok {
			return nil, fmt.Errorf("%w: column \"metadata\" is not a JSON object", ndjson.ErrWrongType)
		}
		s, err := decodeMetadata(obj)
		if err != nil {
			return nil, err
		}
		v.Metadata = s
	case map[string]any:
		s, err := metadataStruct(md)
		if err != nil {
			return nil, err
		}
		v.Metadata = s
	}
	return v, nil
}

// float32s returns the elements of list l as float32s.
func float32s(l *listColumn, cells []cell) ([]float32, error) {
	out := make([]float32, len(cells))
	for i, c := range cells {
		if c.v.IsNull() {
			return nil, fmt.Errorf("%w: column %q: null at index %d, want float32", ndjson.ErrWrongType, l.name, i)
		}
		f := c.number()
		out[i] = float32(f)
		if math.IsInf(float64(out[i]), 0) && !math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: column %q: a number not representable as float32 at index %d", ndjson.ErrWrongType, l.name, i)
		}
	}
	return out, nil
}

// uint32s returns the elements of list l, integers, as uint32s.
func uint32s(l *listColumn, cells []cell) ([]uint32, error) {
	out := make([]uint32, len(cells))
	for i, c := range cells {
		if c.v.IsNull() {
			return nil, fmt.Errorf("%w: column %q: null at index %d, want uint32", ndjson.ErrWrongType, l.name, i)
		}
		if c.unsigned && c.uint64() > math.MaxUint32 || !c.unsigned && (c.int64() < 0 || c.int64() > math.MaxUint32) {
			return nil, fmt.Errorf("%w: column %q: a number not representable as uint32 at index %d", ndjson.ErrWrongType, l.name, i)
		}
		out[i] = uint32(c.uint64())
	}
	return out, nil
}

// metadataStruct returns the fields of a struct "metadata" column as
// metadata; nil when all are null.
func metadataStruct(fields map[string]any) (*structpb.Struct, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	md := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(fields))}
	for k, f := range fields {
		switch f := f.(type) {
		case []cell:
			list := make([]*structpb.Value, len(f))
			for i, c := range f {
				if c.v.IsNull() {
					return nil, fmt.Errorf("%w: column %q: null at index %d, want string", ndjson.ErrWrongType, "metadata."+k, i)
				}
				if !utf8.Valid(c.v.ByteArray()) {
					return nil, notUnicode("metadata." + k)
				}
				list[i] = structpb.NewStringValue(string(c.v.ByteArray()))
			}
			md.Fields[k] = structpb.NewListValue(&structpb.ListValue{Values: list})
		case cell:
			switch f.v.Kind() {
			case parquet.Boolean:
				md.Fields[k] = structpb.NewBoolValue(f.v.Boolean())
			case parquet.ByteArray:
				if !utf8.Valid(f.v.ByteArray()) {
					return nil, notUnicode("metadata." + k)
				}
				md.Fields[k] = structpb.NewStringValue(string(f.v.ByteArray()))
			default:
				md.Fields[k] = structpb.NewNumberValue(f.number())
			}
		}
	}
	return md, nil
}

// notUnicode is the rule broken by a string of column that is not UTF-8,
// as the NDJSON reader words it for a line's metadata.
func notUnicode(column string) error {
	return fmt.Errorf("%w: column %q holds a string that is not valid Unicode (a byte that is not UTF-8)", ndjson.ErrWrongType, column)
}

// jsonMetadata is the string of a "metadata" column of JSON strings.
type jsonMetadata string

// object returns m compacted, without the spaces and line breaks between
// its tokens, if it is a JSON object (which may hold strings that are not
// valid Unicode: encoding/json does not check them); ok is false if not.
func (m jsonMetadata) object() (obj []byte, ok bool) {
	var b bytes.Buffer
	if json.Compact(&b, []byte(m)) != nil || !bytes.HasPrefix(b.Bytes(), []byte("{")) {
		return nil, false
	}
	return b.Bytes(), true
}

// MarshalJSON writes m in a dead letter as the JSON object it holds, so
// that the letter, once fixed, is a record whose metadata is that object,
// as the NDJSON reader wants it; and as a JSON string if it holds no
// object, which the NDJSON reader refuses, as m is refused here.
func (m jsonMetadata) MarshalJSON() ([]byte, error) {
	if obj, ok := m.object(); ok {
		return obj, nil
	}
	return json.Marshal(string(m))
}

// longestMetadata is the longest "metadata" string a row can hold: the
// longest that a record line with a one-byte id, {"id":"_","metadata":<it>},
// can hold, so that its letter, replayed, is read.
const longestMetadata = ndjson.MaxLineBytes - len(`{"id":"_","metadata":}`)

// decodeMetadata decodes obj, a compacted JSON object (see
// jsonMetadata.object), as NDJSON metadata, with NDJSON's rules and
// messages, so that a row and its dead letter, replayed, are refused alike.
func decodeMetadata(obj []byte) (*structpb.Struct, error) {
	if len(obj) > longestMetadata {
		return nil, fmt.Errorf("%w: column \"metadata\" is longer than %d bytes", ndjson.ErrWrongType, longestMetadata)
	}
	return ndjson.DecodeMetadata(obj)
}
