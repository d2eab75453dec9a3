package ndjson

// SetMaxLineBytes has r take lines of at most n bytes in place of
// MaxLineBytes, and letters of bad lines up to BadLetterLimit(n), so that
// a test of lines at the limit need not build 64 MiB ones.
func (r *Reader) SetMaxLineBytes(n int) { r.maxLine = n }

// SetMaxLineBytes has d write the letters of bad lines of at most n bytes
// as it writes those of MaxLineBytes.
func (d *DeadLetters) SetMaxLineBytes(n int) { d.maxLine = n }

// BadLetterLimit is MaxBadLetterBytes for lines of at most maxLine bytes.
var BadLetterLimit = badLetterLimit
