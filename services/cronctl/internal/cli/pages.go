package cli

import (
	"flag"

	"google.golang.org/protobuf/proto"
)

// pageFlags are a list command's --page-size, --page-token and --all.
type pageFlags struct {
	size  int
	token string
	all   bool
}

func (p *pageFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.size, "page-size", 0, "per page (default 50, at most 1000)")
	fs.StringVar(&p.token, "page-token", "", "the next page, from a previous list")
	fs.BoolVar(&p.all, "all", false, "follow every page")
}

// collect is collectPages from --page-token, following every page with
// --all.
func (p *pageFlags) collect(page func(token string) ([]proto.Message, string, error)) ([]proto.Message, string, error) {
	return collectPages(p.all, p.token, page)
}

// collectPages calls page with token, then, when all is set, with each
// next page's token until the last page, and returns the items and the
// next page's token.
func collectPages(all bool, token string, page func(token string) ([]proto.Message, string, error)) ([]proto.Message, string, error) {
	var items []proto.Message
	for {
		got, next, err := page(token)
		if err != nil {
			return nil, "", err
		}
		items, token = append(items, got...), next
		if !all || token == "" {
			return items, token, nil
		}
	}
}

func messages[T proto.Message](list []T) []proto.Message {
	out := make([]proto.Message, len(list))
	for i, m := range list {
		out[i] = m
	}
	return out
}
