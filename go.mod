module github.com/consumergroup-operator/consumergroup-operator

go 1.26
