module github.com/ntask/ntask-go/examples/push

go 1.19

require (
	github.com/jackc/pgx/v4 v4.18.3
	github.com/ntask/ntask-go v0.0.0
)

// until the library is published: this tree's copy
replace github.com/ntask/ntask-go => ../../clients/go
