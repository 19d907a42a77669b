package apikey

// IsNamespace reports whether s is a possible namespace name: 1-63
// characters of [a-z0-9-], starting and ending with a letter or digit.
// targetcheck uses it to tell which AMQP names a namespace's prefix could
// reach.
func IsNamespace(s string) bool { return namespacePattern.MatchString(s) }
