package deploy

import "embed"

// The plain example configurations docs/deploy.md and the image test
// start from, outside any manifest.
//
//go:embed examples
var examples embed.FS

// Example returns the text of deploy/examples/<tier>.yaml.
func Example(tier string) (string, error) {
	b, err := examples.ReadFile("examples/" + tier + ".yaml")
	return string(b), err
}
