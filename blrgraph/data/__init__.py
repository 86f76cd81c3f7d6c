"""Data sets bundled with blrgraph (CSV files); load them with ``blrgraph.io.load_example``.

iris.csv: Fisher's / Anderson's iris measurements (150 flowers; sepal and petal
length and width in cm; species), as shipped with scikit-learn
(``sklearn.datasets.load_iris``), columns renamed to sepal_length,
sepal_width, petal_length, petal_width, species.
"""
