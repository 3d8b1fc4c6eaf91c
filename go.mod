module github.com/retryfuse/retryfuse

go 1.26

require github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
