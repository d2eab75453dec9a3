package share

// The core package registers how a Store becomes one of its options, so
// that a package of this module implementing a Store (upsertredis) can
// offer that option while the core package exports none: users reach
// shared state through one door, the Store's package.
var newOption func(Store) any

// RegisterOption is called once, by the core package's init, with the
// function that turns a Store into an upsert.Option.
func RegisterOption(f func(Store) any) { newOption = f }

// Option returns the core package's option that makes a run share its
// lanes through s. The result is an upsert.Option; the caller asserts it.
// It panics if the core package is not linked in, which cannot happen for
// a caller that imports it to name the option's type.
func Option(s Store) any { return newOption(s) }
