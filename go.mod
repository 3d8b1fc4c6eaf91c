module github.com/retryfuse/retryfuse

go 1.26
