"""Data files read into learner rows, for `scinol learn` and `scinol produce`:
CSV (pyarrow), libsvm/svmlight and Vowpal Wabbit text, their compiled
parsers over blocks of lines, and reading ahead in a thread. No Kafka, no
Beam."""
