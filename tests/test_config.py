import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from augsbert_ray.config import JobSpec, SpecError, dump_spec, load_spec


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_defaults_are_complete_and_round_trip(tmp_path: Path) -> None:
    spec = load_spec(None)
    assert spec.data.dataset == "stsb" and spec.task == "regression"
    assert spec.sampling.strategies == ["bm25", "random"] and spec.sampling.top_k == 3
    assert (spec.bi_encoder.batch_size, spec.bi_encoder.learning_rate, spec.bi_encoder.warmup_ratio) == (16, 2e-5, 0.1)
    again = load_spec(write(tmp_path, dump_spec(spec)))
    assert again == spec


def test_shipped_jobs_validate() -> None:
    for job in Path(__file__).parents[1].glob("jobs/*.yaml"):
        assert isinstance(load_spec(job), JobSpec), job


def test_unknown_key_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"sampling\.topk: unknown key"):
        load_spec(write(tmp_path, "sampling:\n  topk: 3\n"))


def test_wrong_type_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"data\.train_limit"):
        load_spec(write(tmp_path, "data:\n  train_limit: lots\n"))
    with pytest.raises(SpecError, match=r"sampling\.strategies\.0"):
        load_spec(None, ["sampling.strategies=[nonsense]"])


def test_missing_file_names_the_field(tmp_path: Path) -> None:
    text = "data:\n  dataset: null\n  train: {path: /nope/train.csv}\n  test: {path: /nope/test.csv}\n"
    with pytest.raises(SpecError, match=r"data\.train\.path: .*file not found: /nope/train.csv"):
        load_spec(write(tmp_path, text))


def test_missing_model_path_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"cross_encoder\.model: .*model path not found"):
        load_spec(None, ["cross_encoder.model=./no/such/model"])
    with pytest.raises(SpecError, match=r"cross_encoder\.trained: .*no saved model \(config.json\) in /no/such/run"):
        load_spec(None, ["cross_encoder.trained=/no/such/run"])


def test_set_overrides_keep_types() -> None:
    spec = load_spec(None, ["data.train_limit=1000", "sampling.strategies=bm25", "labeling.max_actors=2", "seed=7"])
    assert spec.data.train_limit == 1000
    assert spec.sampling.strategies == ["bm25"]
    assert spec.labeling.max_actors == 2 and spec.seed == 7


def test_bad_overrides() -> None:
    with pytest.raises(SpecError, match="KEY=VALUE"):
        load_spec(None, ["data.train_limit"])
    with pytest.raises(SpecError, match=r"seed: Input should be a valid integer"):
        load_spec(None, ["seed.value=1"])
    with pytest.raises(SpecError, match="min_actors"):
        load_spec(None, ["labeling.min_actors=3", "labeling.max_actors=2"])


def test_missing_spec_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "absent.yaml")
    with pytest.raises(SpecError, match=r"not valid YAML: .*, line 2 column 1$"):
        load_spec(write(tmp_path, "data: [unclosed\n"))
    with pytest.raises(SpecError, match=r"a directory, not a YAML file"):
        load_spec(tmp_path)
    with pytest.raises(SpecError, match=r"key 'data' appears twice in one mapping, line 3 column 1"):  # was: the last one won
        load_spec(write(tmp_path, "data:\n  dataset: stsb\ndata:\n  dataset: mrpc\n"))
    (tmp_path / "cp1252.yaml").write_bytes(b"seed: 1\nname: caf\xe9\n")
    with pytest.raises(SpecError, match=r"cp1252.yaml:2: not UTF-8"):
        load_spec(tmp_path / "cp1252.yaml")
    with pytest.raises(SpecError, match=r"not valid YAML: a key must be a name, not a list, line 1 column 3$"):  # was: TypeError
        load_spec(write(tmp_path, "? [a, b]\n: 1\n"))


@pytest.mark.parametrize("override, message", [
    ("seed=-5", "seed: Input should be greater than or equal to 0"),
    ("tuning.seeds=[1, -1]", "tuning.seeds: Value error, seeds must be >= 0"),
    ("data.train.path=tests", "data.train.path: Value error, a directory, not a file"),  # was: IsADirectoryError later
])
def test_negative_seeds_and_a_directory_as_a_data_file_are_refused(override: str, message: str) -> None:
    sources = ["data.dataset=null", "data.dev.path=README.md", "data.test.path=README.md"]
    with pytest.raises(SpecError, match=re.escape(message)):
        load_spec(None, [*sources, "data.train.path=README.md", override])


@pytest.mark.parametrize("override", ["sampling.strategies=[bm25,", "name=@home"])
def test_a_set_value_that_is_not_yaml_is_one_line(override: str) -> None:
    """Before: a yaml.ParserError / ScannerError traceback."""
    with pytest.raises(SpecError, match=rf"^--set {re.escape(override)}: the value is not valid YAML \(.*, line 1 column \d+\)$"):
        load_spec(None, [override])


@pytest.mark.parametrize("pair, message", [
    ("precision: bf16\n  runtime: onnx", "precision bf16 runs on torch"),
    ("precision: int8\n  runtime: torch", "precision int8 runs on ONNX Runtime"),
])
def test_labeling_runtime_must_fit_the_precision(pair: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, f"labeling:\n  {pair}\n"))


def test_fits_survive_a_failure_on_a_cluster_by_default(tmp_path: Path) -> None:
    assert load_spec(None).training.max_failures == 0  # an embedded local Ray
    assert load_spec(None, ["ray.address=auto"]).training.max_failures == 1
    assert load_spec(write(tmp_path, "ray:\n  address: 10.0.0.5:6379\n")).training.max_failures == 1
    assert load_spec(None, ["ray.address=auto", "training.max_failures=0"]).training.max_failures == 0  # explicit wins
    assert load_spec(None, ["training.max_failures=3"]).training.max_failures == 3
    resolved = load_spec(None, ["ray.address=auto"])
    assert load_spec(write(tmp_path, dump_spec(resolved))) == resolved  # spec.yaml records the resolved value


def test_long_jobs_save_training_states_and_survive_failures() -> None:
    for job in Path(__file__).parents[1].glob("jobs/*.yaml"):
        training = load_spec(job).training
        assert (training.max_failures, training.checkpoint_every) == (2, 200), job


def test_a_score_range_under_a_classification_task_is_refused(tmp_path) -> None:
    """Before: ignored in silence (`augsbert evaluate` refused the same combination)."""
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2,label\na,b,1\n")
    files = {"dataset": None, "train": {"path": str(pairs)}, "dev": {"path": str(pairs)}}
    with pytest.raises(ValidationError, match=r"test.score_range scales regression labels; a classification task takes 0/1 labels"):
        JobSpec.model_validate({"data": {**files, "task": "classification", "test": {"path": str(pairs), "score_range": [0, 5]}}})
    assert JobSpec.model_validate({"data": {**files, "test": {"path": str(pairs), "score_range": [0, 5]}}}).data.test.score_range == (0, 5)


def test_a_gpu_fit_under_tuning_needs_gpus_per_trial() -> None:
    """Before: training.use_gpu was silently ignored by the tuned fits, which trained on CPU."""
    with pytest.raises(ValidationError, match=r"training.use_gpu: .* set tuning.gpus_per_trial too"):
        JobSpec.model_validate({"training": {"use_gpu": True}, "tuning": {"seeds": 2}})
    JobSpec.model_validate({"training": {"use_gpu": True}, "tuning": {"seeds": 2, "gpus_per_trial": 0.5}})


@pytest.mark.parametrize("overrides, message", [
    (["sampling.strategies=[]"], "sampling.strategies: List should have at least 1 item"),  # was: a run that trained a teacher for nothing
    (["tuning.seeds=2", "tuning.models=[]"], "tuning.models: List should have at least 1 item"),  # was: an empty report
    (["tuning.seeds=2", "tuning.top_k=[3, 5]", "tuning.models=[sbert]"],
     "tuning: Value error, top_k [3, 5] is searched for models sampled by bm25, bm25+semantic, semantic, and none of the tuned ones is (sbert)"),
    (["cross_encoder.learning_rate=.inf"], "cross_encoder.learning_rate: Input should be a finite number"),
    (["labeling.cpus_per_actor=.inf"], "labeling.cpus_per_actor: Input should be a finite number"),  # was: OverflowError in Ray
    (["evaluation.cpus=0.00001"], "evaluation.cpus: Value error, 1e-05 is below the smallest amount Ray schedules, 0.0001"),
    (["tuning.seeds=2", "tuning.gpus_per_trial=0.00005"], "tuning.gpus_per_trial: Value error, 5e-05 is below the smallest amount"),
    (["tuning.seeds=2", "tuning.gpus_per_trial=2"], "tuning.gpus_per_trial: Input should be less than or equal to 1"),  # was: DataParallel
    (["ray.address=http://127.0.0.1:8265"], "ray.address: Value error, http://127.0.0.1:8265 is a dashboard URL, which `augsbert submit` "
     "takes; to join a cluster give auto, HOST:6379 or ray://HOST:10001"),  # was: Ray's error after the run directory was made
], ids=["no-strategies", "no-tuned-models", "top-k-unused", "inf-lr", "inf-cpus", "tiny-cpus", "tiny-gpus", "two-gpus-a-trial",
        "dashboard-address"])
def test_settings_a_run_cannot_use_are_refused_when_the_spec_is_read(overrides: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        load_spec(None, overrides)
    assert load_spec(None, ["evaluation.gpus=0", "ray.address=ray://10.0.0.5:10001"]).evaluation.gpus == 0  # 0 and a client address are fine


def test_job_requests_name_the_settings_that_do_not_fit() -> None:
    """Ray waits forever for a request no node can meet (a fit's workers, an evaluation task): refused up front."""
    from augsbert_ray.pipeline.start import job_requests
    from augsbert_ray.runtime import check_requests

    two_cpus = {"CPU": 2.0}
    check_requests(job_requests(load_spec("jobs/stsb_seed_opt.yaml")), two_cpus)
    for overrides, message in [
        (["training.num_workers=2"], "training.num_workers 2 x cpus_per_worker 2 (4 CPUs at once), but the Ray cluster has 2 CPUs"),
        (["training.use_gpu=true", "tuning.gpus_per_trial=0.5"], "training.use_gpu with num_workers 1 (a GPU each), but the Ray cluster has 0 GPUs"),
        (["evaluation.gpus=0.25"], "evaluation.gpus 0.25, but the Ray cluster has 0 GPUs"),
        (["sampling.search_cpus=3"], "sampling.search_cpus 3, but the Ray cluster has 2 CPUs"),
        (["tuning.cpus_per_trial=2.5"], "tuning.cpus_per_trial 2.5, but the Ray cluster has 2 CPUs"),
    ]:
        with pytest.raises(SpecError, match=re.escape(message)):
            check_requests(job_requests(load_spec("jobs/stsb_seed_opt.yaml", overrides)), two_cpus)


def test_a_trained_model_of_the_other_kind_is_refused(tiny_cross_encoder: Path, tiny_two_label_cross_encoder: Path) -> None:
    """Loaded as the other kind, a model gets a fresh, random part: random silver labels, or a random teacher. A
    cross-encoder of two outputs would score by its first (before: the gate and labeling took it, exit 0)."""
    from augsbert_ray.models import resolve_model
    from augsbert_ray.pipeline.start import check_run_models

    minilm = resolve_model("minilm")
    with pytest.raises(SpecError, match=re.escape(f"cross_encoder.trained {minilm}: a bi-encoder, not a cross-encoder")):
        check_run_models(load_spec(None, [f"cross_encoder.trained={minilm}"]))
    with pytest.raises(SpecError, match=re.escape(f"teacher.bi_encoder.trained {tiny_cross_encoder}: a cross-encoder, not a bi-encoder")):
        check_run_models(load_spec(None, ["teacher.kind=bi-encoder", f"teacher.bi_encoder.trained={tiny_cross_encoder}"]))
    check_run_models(load_spec(None, [f"cross_encoder.trained={tiny_cross_encoder}"]))
    with pytest.raises(SpecError, match=re.escape(f"cross_encoder.trained {tiny_two_label_cross_encoder}: a cross-encoder with 2 outputs")):
        check_run_models(load_spec(None, [f"cross_encoder.trained={tiny_two_label_cross_encoder}"]))


def test_mrpc_files_default_to_classification(data_dir: Path) -> None:
    """`augsbert evaluate --data FILE --format mrpc` (or a spec's files of format mrpc). Before: scored as regression,
    though --task's help promised classification for mrpc."""
    from augsbert_ray.config import DataSpec

    test_file = {"path": str(data_dir / "mrpc" / "msr_paraphrase_test.txt"), "format": "mrpc"}
    assert DataSpec(dataset=None, test=test_file, dev=test_file).resolved_task == "classification"
    assert DataSpec(dataset=None, test={**test_file, "format": "tsv"}, dev=test_file, task="regression").resolved_task == "regression"
    assert DataSpec(dataset="stsb").resolved_task == "regression"
