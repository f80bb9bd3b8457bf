r"""Turn a Pyro model (and optionally a guide) into batched log-density functions: the adapter.

This is the only module that knows about Pyro's effect handlers. Given a model that follows the
convention of ``API.md`` (first argument ``x`` of shape ``(N, *event_shape)``, a plate over dim 0 of
``x``, observed sites conditioned on ``x``), :func:`make_target` traces it once to discover the latent
sites, the observed sites and the plate over examples, then builds functions over a flat
*unconstrained* latent tensor ``u`` of shape ``(K * N, d)``: ``K`` chains (or samples) of ``N``
examples folded into the data plate, row ``k * N + n`` holding chain ``k`` of example ``n``.

.. math::
    \log p(u) = \sum_{\text{latent } s} \log p_s(T_s(u_s)) + \log |\det J_{T_s}(u_s)|,
    \qquad \log p(x \mid u) = \sum_{\text{observed } o} \log p_o(x_o \mid T(u)),

where :math:`T_s` = ``biject_to(support_s)`` maps the real line to the site's support. Both are
per-row sums over every dimension but the data plate's. The hot path evaluates the model through a
lean messenger with Pyro's argument validation off (validation happens once, at the boundary); each
site's density comes from :mod:`pyrolik.model.site_density` (fewer full-size operations for Bernoulli and
Normal sites, and the closed-form score of a Normal latent whose parameters need no gradient, so a
standard-normal prior costs no backward pass). From its third call on, :meth:`Target.value_and_grad`
replays the recorded tensor operations of one evaluation instead of re-running the Pyro program
(:mod:`pyrolik.model.replay`: the same numbers, checked when recorded, or eager evaluation where that is
not safe). ``benchmarks/RESULTS.md`` has the measured cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import pyro
import torch
from pyro.distributions import constraints
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import Tensor
from torch.distributions import biject_to

from pyrolik._random import fork_rng_from
from pyrolik._validate import check_count, validate_data
from pyrolik.model.guide_cache import CachedGuide, SiteRecord, cache_guide
from pyrolik.model.replay import ReplayCache, replay_default
from pyrolik.model.site_density import normal_log_prob_and_score, per_row_log_prob, sum_to_rows

__all__ = ["AnnealingPath", "Draw", "SiteLayout", "Target", "ValueAndGrad", "make_target"]

ModelFn = Callable[..., Any]
PATHS = ("prior", "guide")  # the initial distributions f_0 of an annealing path


class SiteLayout(NamedTuple):
    """Where one latent site lives in the flat unconstrained vector of an example."""

    name: str
    offset: int  # first column in u
    size: int  # number of unconstrained values per example
    shape: tuple[int, ...]  # unconstrained value shape per example, the data-plate dim removed
    plate_index: int  # position of the data-plate dim in the site's value


class Draw(NamedTuple):
    """Exact draws of the latents: flat unconstrained, constrained by site, and a log-density."""

    u: Tensor  # (rows, d)
    values: dict[str, Tensor]  # constrained, model layout
    log_density: Tensor  # (rows,)


class ValueAndGrad(NamedTuple):
    """Values and gradients of the two terms of a tempered density, per row."""

    log_init: Tensor  # (rows,)
    log_ratio: Tensor  # (rows,): log_final - log_init
    grad_init: Tensor  # (rows, d)
    grad_ratio: Tensor  # (rows, d)


def _is_real(support: constraints.Constraint) -> bool:
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real


def _plus(total: Tensor | float, term: Tensor) -> Tensor:
    """Running per-row sum; the first term is taken as it is (no ``0.0 + x`` in the graph)."""
    return term if isinstance(total, float) else total + term


def _plate_frame(msg: dict, plate_name: str):
    for frame in msg["cond_indep_stack"]:
        if frame.name == plate_name:
            return frame
    return None


class _Evaluate(Messenger):
    """Set latent sites to given values (or let them sample) and accumulate per-row log-densities.

    ``values`` maps site names to unconstrained (``unconstrained=True``) or constrained values; when it
    is ``None`` the latents are sampled and recorded in ``self.values`` (constrained).
    """

    def __init__(self, plate_name: str, rows: int, values: dict[str, Tensor] | None,
                 unconstrained: bool, scores: bool = False, memo: dict | None = None,
                 record: bool = False):
        super().__init__()
        self.records: list[SiteRecord] | None = [] if record else None
        self.memo = {} if memo is None else memo  # kept by the Target across evaluations
        self.want_scores = scores  # closed-form scores of Normal latents (see _site_density)
        self.scores: dict[str, Tensor] = {}
        self.plate_name = plate_name
        self.rows = rows
        self.given = values
        self.unconstrained = unconstrained
        self.values: dict[str, Tensor] = {}
        self.log_latent: Tensor | float = 0.0
        self.log_obs: Tensor | float = 0.0
        self._ladj: dict[str, Tensor] = {}

    def _pyro_param(self, msg: dict) -> None:
        # pyro.module registers each parameter at every call; the store hands back the module's own
        # tensor, so once seen, hand it back directly (saves the store's bookkeeping in the hot loop)
        args = msg["args"]
        if len(args) > 1 and args[1] is not None and self.memo.get(("param", msg["name"])) is args[1]:
            msg["value"] = args[1]

    def _pyro_post_param(self, msg: dict) -> None:
        args = msg["args"]
        if len(args) > 1 and isinstance(args[1], Tensor) and msg["value"] is args[1]:
            self.memo[("param", msg["name"])] = args[1]

    def _pyro_sample(self, msg: dict) -> None:
        if site_is_subsample(msg):
            self._full_plate_indices(msg)
            return
        if msg["is_observed"] or self.given is None:
            return
        name = msg["name"]
        if name not in self.given:
            raise ValueError(
                f"latent site {name!r} appeared that was not in the first trace of the model; "
                "pyrolik needs a fixed set of latent sites per example"
            )
        value = self.given[name]
        if self.unconstrained:
            support = msg["fn"].support
            if not _is_real(support):
                t = biject_to(support)
                z = t(value)
                self._ladj[name] = t.log_abs_det_jacobian(value, z)
                value = z
        msg["value"] = value

    def _full_plate_indices(self, msg: dict) -> None:
        """A plate that does not subsample gets ``arange(size)``: made once, not at every call."""
        fn = msg["fn"]
        if msg["value"] is not None or getattr(fn, "use_cuda", None) is not None \
                or not (fn.subsample_size is None or fn.subsample_size >= fn.size):
            return
        key = ("arange", fn.size, str(fn.device))
        if key not in self.memo:
            self.memo[key] = torch.arange(fn.size, device=fn.device)
        msg["value"] = self.memo[key]

    def _pyro_post_sample(self, msg: dict) -> None:
        if msg["infer"].get("_deterministic") or site_is_subsample(msg):
            return
        frame = _plate_frame(msg, self.plate_name)
        name = msg["name"]
        if frame is None:
            kind = "observed" if msg["is_observed"] else "latent"
            raise ValueError(
                f"{kind} site {name!r} is outside the plate {self.plate_name!r} over the examples; "
                "pyrolik estimates per-example log p(x): put every sample site inside the data plate "
                "(global quantities belong in pyro.param)"
            )
        if self.records is not None and not msg["is_observed"]:
            self.records.append(SiteRecord(name, msg["fn"], frame.dim, msg["scale"], msg["mask"],
                                           name in self._ladj))
        if self.want_scores and not msg["is_observed"] and name not in self._ladj:
            found = normal_log_prob_and_score(msg["fn"], msg["value"], msg["scale"], msg["mask"],
                                              frame.dim, self.rows, name)
            if found is not None:
                self.log_latent = _plus(self.log_latent, found[0])
                self.scores[name] = found[1]
                return
        lp = per_row_log_prob(msg["fn"], msg["value"], msg["scale"], msg["mask"], frame.dim,
                              self.rows, name)
        if msg["is_observed"]:
            self.log_obs = _plus(self.log_obs, lp)
            return
        ladj = self._ladj.pop(name, None)
        if ladj is not None:
            # the Jacobian term, summed over the site's dims but the data plate's
            batch_ndim = len(msg["fn"].batch_shape)
            while ladj.dim() > batch_ndim:
                ladj = ladj.sum(-1)
            lp = lp + sum_to_rows(ladj, frame.dim, self.rows, name)
        self.log_latent = _plus(self.log_latent, lp)
        if self.given is None:
            self.values[name] = msg["value"]


@dataclass
class Target:
    """A model (and optional guide) as batched functions of a flat unconstrained latent ``u``.

    Built by :func:`make_target`. ``rows = num_chains * num_examples``; row ``k * N + n`` is chain
    ``k`` of example ``n``. All functions return per-row tensors of shape ``(rows,)``.
    """

    model: ModelFn
    x: Tensor  # (rows, *event_shape): the data repeated num_chains times
    num_chains: int
    num_examples: int
    plate_name: str
    sites: tuple[SiteLayout, ...]
    observed: tuple[str, ...]
    model_args: tuple = ()
    model_kwargs: dict = field(default_factory=dict)
    guide: ModelFn | None = None
    supports: dict[str, constraints.Constraint] = field(default_factory=dict)
    replay: bool = True  # replay recorded evaluations in value_and_grad (pyrolik.model.replay)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def rows(self) -> int:
        return self.num_chains * self.num_examples

    @property
    def latent_dim(self) -> int:
        return sum(s.size for s in self.sites)

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype if self.x.is_floating_point() else torch.get_default_dtype()

    def path(self, name: str = "prior") -> AnnealingPath:
        r"""The annealing path from ``"prior"`` (:math:`f_0 = p(z)`) or ``"guide"`` (:math:`f_0 = q(z
        \mid x)`, AIS+encoder) to :math:`f_1 = p(x, z)`: what the annealing engine evaluates."""
        if name not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {name!r}")
        if name == "guide":
            self.guide_or_raise()
        return AnnealingPath(self, name)

    def first_chains(self, k: int) -> Target:
        """The same target restricted to its first ``k`` chains (rows are chain-major)."""
        if k >= self.num_chains:
            return self
        return replace(self, x=self.x[: k * self.num_examples], num_chains=k, _memo={})

    # -- flat <-> sites ---------------------------------------------------------------------------
    def split(self, u: Tensor) -> dict[str, Tensor]:
        """Flat ``(rows, d)`` -> per-site tensors in the model's own layout (unconstrained)."""
        out = {}
        for s in self.sites:
            v = u if s.size == u.shape[1] else u[:, s.offset : s.offset + s.size]
            if v.shape[1:] != s.shape:
                v = v.reshape((u.shape[0],) + s.shape)
            out[s.name] = v.movedim(0, s.plate_index) if s.plate_index else v
        return out

    def join(self, values: dict[str, Tensor], fill: Tensor | None = None) -> Tensor:
        """Per-site tensors (unconstrained, model layout) -> flat ``(rows, d)``.

        A site missing from ``values`` is zero there (allowed only when ``fill``, a tensor giving
        dtype and device, is passed).
        """
        parts = [values[s.name].movedim(s.plate_index, 0).reshape(self.rows, -1)
                 if fill is None or s.name in values else fill.new_zeros(self.rows, s.size)
                 for s in self.sites]
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def constrain(self, u: Tensor) -> dict[str, Tensor]:
        """Flat unconstrained ``u`` -> constrained site values in the model's own layout."""
        return {k: biject_to(self.supports[k])(v) for k, v in self.split(u).items()}

    def unravel(self, u: Tensor) -> dict[str, Tensor]:
        """Flat unconstrained ``u`` -> constrained site values, each of shape ``(K, N, *site)``."""
        out, values = {}, self.constrain(u)
        for s in self.sites:
            z = values[s.name].movedim(s.plate_index, 0)
            out[s.name] = z.reshape((self.num_chains, self.num_examples) + z.shape[1:])
        return out

    def ravel(self, values: dict[str, Tensor]) -> Tensor:
        """Constrained site values (model layout) -> flat unconstrained ``u``."""
        return self.join({s.name: biject_to(self.supports[s.name]).inv(values[s.name])
                          for s in self.sites})

    # -- evaluation -----------------------------------------------------------------------------
    def _run(self, fn: ModelFn, values: dict[str, Tensor] | None, unconstrained: bool,
             scores: bool = False, record: bool = False) -> _Evaluate:
        ev = _Evaluate(self.plate_name, self.rows, values, unconstrained, scores, self._memo, record)
        with pyro.validation_enabled(False), ev:
            fn(self.x, *self.model_args, **self.model_kwargs)
        return ev

    def log_prior_and_obs(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """``(log p(u) incl. log|det J|, log p(x | u))``, each ``(rows,)``, in one model pass."""
        ev = self._run(self.model, self.split(u), True)
        return _as_rows(ev.log_latent, u), _as_rows(ev.log_obs, u)

    def log_prior(self, u: Tensor) -> Tensor:
        """Per-row log prior density of ``u``, including the log-det-Jacobian."""
        return self.log_prior_and_obs(u)[0]

    def log_obs(self, u: Tensor) -> Tensor:
        """Per-row ``log p(x | z(u))``, summed over the observed sites."""
        return self.log_prior_and_obs(u)[1]

    def log_guide(self, u: Tensor) -> Tensor:
        """Per-row log density of ``u`` under the guide, including the log-det-Jacobian."""
        return _as_rows(self._run(self.guide_or_raise(), self.split(u), True).log_latent, u)

    def value_and_grad(self, u: Tensor, path: str = "prior") -> ValueAndGrad:
        r"""Both terms of :math:`\log f_\beta = \log f_0 + \beta (\log f_1 - \log f_0)` and their gradients.

        ``path="prior"``: :math:`\log f_0 = \log p(u)`, ratio :math:`\log p(x \mid u)`.
        ``path="guide"``: :math:`\log f_0 = \log q(u \mid x)`, ratio
        :math:`\log p(u) + \log p(x \mid u) - \log q(u \mid x)`.
        One model pass (and one guide pass on the guide path), forward and backward. Keeping the two
        gradients apart lets a change of beta cost no new pass (``PEERS.md``: no stale tempered cache).
        Normal sites with gradient-free parameters contribute their closed-form score
        :math:`-(z - \mu)/\sigma^2` instead of a backward pass; the sum is the same gradient
        (``tests/test_site_density.py`` checks it against autograd on a mixed model).

        From the third call of a path on, the evaluation's tensor operations are replayed from a
        recording instead of re-running the Pyro program (:mod:`pyrolik.model.replay`: same numbers, checked
        when recorded; ``replay_status`` says whether it is in use).
        """
        if path not in ("prior", "guide"):
            raise ValueError(f"path must be 'prior' or 'guide', got {path!r}")
        key = (path, tuple(u.shape), u.stride(), u.dtype, u.device)  # a view needs the layout
        state = self._program_state(u, path) if self.replay else None
        return self._replays.run(key, lambda v: self._value_and_grad(v, path), u, state)

    def _program_state(self, u: Tensor, path: str) -> tuple:
        """What a recorded evaluation depends on besides the tensors it holds: the guide kept for the
        guide path (re-derived when its parameters change) and which tensors Pyro's param store holds
        (a parameter replaced, not updated in place, means a new recording)."""
        epoch = 0
        if path == "guide" and self._cached_guide(u) is not None:
            epoch = self._memo["guide_epoch"]
        return epoch, tuple(id(p) for _, p in pyro.get_param_store().named_parameters())

    @property
    def _replays(self) -> ReplayCache:
        replays = self._memo.get("replays")
        if replays is None:
            replays = self._memo["replays"] = ReplayCache(self.replay)
        return replays

    @property
    def replay_status(self) -> dict[str, str]:
        """How each evaluation path runs: ``"replay"``, ``"eager"`` or why it stays eager (``_replay``)."""
        return {key[0]: status for key, status in self._replays.status.items()}

    def evaluation(self, path: str) -> str:
        """One line for a result's settings: ``"replay"``, ``"eager"`` or ``"eager (why)"``."""
        status = self.replay_status.get(path, "eager")
        return status if status in ("replay", "eager") else f"eager ({status})"

    def _value_and_grad(self, u: Tensor, path: str) -> ValueAndGrad:
        """:meth:`value_and_grad` by running the Pyro program (what the replay records)."""
        with torch.enable_grad():
            u = u.detach().requires_grad_(True)
            ev = self._run(self.model, self.split(u), True, scores=True)
            lp, lo = _as_rows(ev.log_latent, u), _as_rows(ev.log_obs, u)
            score_p = self._flat_score(ev.scores, u)  # closed-form part of d log p(u) / du
            if path == "prior":
                init, ratio = lp, lo
                g_ratio = _grad(ratio, u, retain=init.requires_grad)
                g_init = _add(_grad(init, u, retain=False), score_p)
            else:
                init, score_q = self._log_guide_and_score(u)
                ratio = lp + lo - init
                g_ratio = _add(_grad(ratio, u, retain=True), score_p,
                               None if score_q is None else -score_q)
                g_init = _add(_grad(init, u, retain=False), score_q)
        zero = None if g_ratio is not None and g_init is not None else torch.zeros_like(u)
        return ValueAndGrad(init.detach(), ratio.detach(),
                            zero if g_init is None else g_init, zero if g_ratio is None else g_ratio)

    def _log_guide_and_score(self, u: Tensor) -> tuple[Tensor, Tensor | None]:
        """``log q(u | x)`` per row and its closed-form score (None: all by autograd from ``u``)."""
        cached = self._cached_guide(u)
        if cached is not None:
            log_q, scores = cached.log_prob_and_score(self.split(u.detach()), self.rows)
            return log_q, self._flat_score(scores, u)
        evq = self._run(self.guide_or_raise(), self.split(u), True, scores=True)
        return _as_rows(evq.log_latent, u), self._flat_score(evq.scores, u)

    def _cached_guide(self, u: Tensor) -> CachedGuide | None:
        """The guide's kept Normal parameters (:mod:`pyrolik.model.guide_cache`), checked once per target."""
        cached = self._memo.get("guide")
        if cached is None or (cached is not False and not cached.is_current()):
            guide, z = self.guide_or_raise(), u.detach().requires_grad_(True)
            with torch.enable_grad():
                first = self._run(guide, self.split(z), True, record=True).records
                with torch.no_grad():  # at other latent values: catches detached dependences too
                    second = self._run(guide, self.split(z.detach() + 0.5), True, record=True).records
                cached = cache_guide(first, second, z)
            self._memo["guide"] = False if cached is None else cached
            self._memo["guide_epoch"] = self._memo.get("guide_epoch", 0) + 1
        return cached or None

    def _flat_score(self, scores: dict[str, Tensor], u: Tensor) -> Tensor | None:
        return self.join(scores, fill=u) if scores else None

    def guide_or_raise(self) -> ModelFn:
        """The guide; ``ValueError`` if the target was built without one."""
        if self.guide is None:
            raise ValueError("this target was built without a guide")
        return self.guide

    # -- exact draws ----------------------------------------------------------------------------
    def sample_prior(self, generator: torch.Generator | None = None) -> Draw:
        """Draw ``z ~ p(z)``; ``log_density`` is ``log p(x | z)``, all from one model pass."""
        with fork_rng_from(generator, self.x.device), torch.no_grad():
            ev = self._run(self.model, None, False)
        return Draw(self.ravel(ev.values), ev.values, _as_rows(ev.log_obs, self.x))

    def sample_guide(self, generator: torch.Generator | None = None) -> Draw:
        """Draw ``z ~ q(z | x)``; ``log_density`` is ``log q(z | x)`` of the constrained ``z``."""
        guide = self.guide_or_raise()
        with fork_rng_from(generator, self.x.device), torch.no_grad():
            ev = self._run(guide, None, False)
        return Draw(self.ravel(ev.values), ev.values, _as_rows(ev.log_latent, self.x))

    def log_joint_constrained(self, values: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(log p(z), log p(x | z))`` of constrained site values (no Jacobian), ``(rows,)`` each."""
        with torch.no_grad():
            ev = self._run(self.model, values, False)
        return _as_rows(ev.log_latent, self.x), _as_rows(ev.log_obs, self.x)


@dataclass(frozen=True)
class AnnealingPath:
    r"""One annealing path of a :class:`Target`, :math:`\log f_\beta = (1-\beta)\log f_0 + \beta \log f_1`.

    ``name == "prior"``: :math:`f_0 = p(z)`; ``"guide"``: :math:`f_0 = q(z \mid x)`; :math:`f_1 =
    p(x, z)` in both. The engine sees only this: values and gradients of :math:`\log f_0` and of
    :math:`\log f_1 - \log f_0` per row, and exact draws of :math:`f_0`.
    """

    target: Target
    name: str

    def value_and_grad(self, u: Tensor) -> ValueAndGrad:
        return self.target.value_and_grad(u, self.name)

    def sample_initial(self, generator: torch.Generator | None) -> Tensor:
        """Exact draws of :math:`f_0`, flat unconstrained ``(rows, d)``."""
        t = self.target
        return (t.sample_guide(generator) if self.name == "guide" else t.sample_prior(generator)).u

    def first_chains(self, k: int) -> AnnealingPath:
        """The same path on the target's first ``k`` chains."""
        return AnnealingPath(self.target.first_chains(k), self.name)

    @property
    def evaluation(self) -> str:
        """How the model was evaluated: ``"replay"``, ``"eager"`` or ``"eager (why)"``."""
        return self.target.evaluation(self.name)


def _as_rows(value: Tensor | float, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return like.new_full((like.shape[0],), float(value))


def _grad(out: Tensor, u: Tensor, retain: bool) -> Tensor | None:
    """``d out.sum() / du`` by autograd, or None where ``out`` does not depend on ``u``."""
    if not out.requires_grad:
        return None
    (g,) = torch.autograd.grad(out.sum(), u, retain_graph=retain, allow_unused=True)
    return g


def _add(*terms: Tensor | None) -> Tensor | None:
    """Sum of the terms that are not None; None if all are."""
    total = None
    for t in terms:
        if t is not None:
            total = t if total is None else total + t
    return total


# -- discovery --------------------------------------------------------------------------------------
def _get_trace(fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, validate: bool):
    with fork_rng_from(None), torch.no_grad(), pyro.validation_enabled(validate):
        tr = pyro.poutine.trace(fn).get_trace(x, *args, **kwargs)
        for s in _sample_sites(tr):
            if s["is_observed"]:
                _check_observed_shape(s)
        tr.compute_log_prob()
    return tr


def _any_not_finite(tr) -> bool:
    """Whether some log-density of the trace is NaN or inf."""
    return any(bool((~torch.isfinite(s["log_prob"])).any()) for s in _sample_sites(tr))


def _short(err: BaseException) -> str:
    """Pyro's error message without its tensor dumps and trace tables."""
    keep = []
    for line in str(err).strip().splitlines():
        text = line.strip()
        if text.startswith("Trace Shapes"):
            break
        if text and not text.startswith(("tensor(", "[", "(", "-")) and not text[0].isdigit():
            keep.append(text)
    return " ".join(keep)[:600] or type(err).__name__


def _trace(fn: ModelFn, x: Tensor, args: tuple, kwargs: dict, what: str, copies: int = 1):
    """Trace ``fn`` on ``x`` (``copies`` stacked copies of the user's data, for the message)."""
    try:
        return _get_trace(fn, x, args, kwargs, validate=True)
    except (ValueError, RuntimeError, IndexError) as err:
        # A model whose density is NaN for some examples fails Pyro's validation; let it through
        # (the structure is all discovery needs) so that the estimators flag those examples.
        try:
            tr = _get_trace(fn, x, args, kwargs, validate=False)
        except (ValueError, RuntimeError, IndexError):
            tr = None
        if tr is not None and _any_not_finite(tr):
            return tr
        shape = (x.shape[0] // copies,) + tuple(x.shape[1:])
        stacked = f" (run as {copies} stacked copies: shape {tuple(x.shape)})" if copies > 1 else ""
        raise ValueError(
            f"running the {what} on x of shape {shape}{stacked} failed ({_short(err)}); check that "
            "x has shape (N, *event_shape) matching the observed site, and model_args/model_kwargs"
        ) from err


def _check_observed_shape(site: dict) -> None:
    fn, value = site["fn"], site["value"]
    expected = tuple(fn.batch_shape + fn.event_shape)
    if tuple(value.shape) != expected:
        raise ValueError(
            f"observed site {site['name']!r} has a distribution of shape {expected} but its value "
            f"has shape {tuple(value.shape)}"
        )


def _sample_sites(tr) -> list[dict]:
    return [s for s in tr.nodes.values()
            if s["type"] == "sample" and not s["infer"].get("_deterministic")
            and not site_is_subsample(s)]


def _find_plate(tr_n, tr_2n, n: int) -> str:
    """The data plate: the plate around the observed sites whose size follows the number of examples."""
    observed = [s for s in _sample_sites(tr_n) if s["is_observed"]]
    if not observed:
        raise ValueError(
            "the model has no observed site: condition its observation-noise site on the data, "
            "e.g. pyro.sample('x', dist.Normal(decoder(z), sigma).to_event(1), obs=x)"
        )
    names = None
    for s in observed:
        sizes_n = {f.name: f.size for f in s["cond_indep_stack"]}
        sizes_2n = {f.name: f.size for f in tr_2n.nodes[s["name"]]["cond_indep_stack"]}
        cand = {k for k, v in sizes_n.items() if v == n and sizes_2n.get(k) == 2 * n}
        names = cand if names is None else names & cand
    if not names:
        raise ValueError(
            "no plate over the examples: wrap the model's sample sites in "
            "`with pyro.plate('data', x.shape[0]):` so that dim 0 of x indexes examples"
        )
    if len(names) > 1:
        raise ValueError(f"several plates {sorted(names)} follow the number of examples; use one")
    return names.pop()


def _layout(tr, plate_name: str, n: int) -> tuple[SiteLayout, ...]:
    sites, offset = [], 0
    for s in _sample_sites(tr):
        if s["is_observed"]:
            continue
        fn, name = s["fn"], s["name"]
        if fn.support.is_discrete:
            raise TypeError(
                f"latent site {name!r} is discrete ({type(fn).__name__}); pyrolik's samplers need "
                "continuous latents: marginalise it out in the model (sum over its values)"
            )
        frame = _plate_frame(s, plate_name)
        if frame is None:
            raise ValueError(
                f"latent site {name!r} is outside the plate {plate_name!r} over the examples; "
                "every latent must be per-example (global quantities belong in pyro.param)"
            )
        u = biject_to(fn.support).inv(s["value"])
        batch_ndim = len(fn.batch_shape)
        plate_index = batch_ndim + frame.dim
        per_example = u.movedim(plate_index, 0)
        if per_example.shape[0] != n:
            raise ValueError(f"latent site {name!r} has {per_example.shape[0]} rows, expected {n}")
        shape = tuple(per_example.shape[1:])
        size = int(per_example[0].numel())
        sites.append(SiteLayout(name, offset, size, shape, plate_index))
        offset += size
    if not sites:
        raise ValueError("the model has no latent site: there is nothing to integrate out")
    return tuple(sites)


def make_target(
    model: ModelFn,
    x: Tensor,
    num_chains: int = 1,
    *,
    model_args: tuple = (),
    model_kwargs: dict | None = None,
    guide: ModelFn | None = None,
    replay: bool | None = None,
) -> Target:
    """Trace ``model`` on ``x`` once and return its :class:`Target` for ``num_chains`` copies.

    ``replay``: replay recorded evaluations in :meth:`Target.value_and_grad` (:mod:`pyrolik.model.replay`);
    ``None`` means yes unless the environment sets ``PYROLIK_REPLAY=0``.

    Raises ``ValueError``/``TypeError`` naming the fix for: non-finite data, data that do not fit the
    model, no observed site, no plate over the examples, a discrete latent site, a latent outside the
    data plate, and a guide that misses a latent site.
    """
    x = validate_data(x)
    check_count("num_chains", num_chains)
    if replay is not None and not isinstance(replay, bool):
        raise TypeError(f"replay must be True, False or None (the environment's PYROLIK_REPLAY), "
                        f"got {replay!r}")
    replay = replay_default() if replay is None else replay
    model_kwargs = dict(model_kwargs or {})
    n = x.shape[0]
    x_rep = x.repeat((num_chains,) + (1,) * (x.dim() - 1)) if num_chains > 1 else x
    rows = x_rep.shape[0]
    tr = _trace(model, x_rep, model_args, model_kwargs, "model", num_chains)
    tr_2 = _trace(model, torch.cat([x_rep, x_rep]), model_args, model_kwargs, "model",
                  2 * num_chains)
    plate_name = _find_plate(tr, tr_2, rows)
    sites = _layout(tr, plate_name, rows)
    observed = tuple(s["name"] for s in _sample_sites(tr) if s["is_observed"])
    supports = {s.name: tr.nodes[s.name]["fn"].support for s in sites}
    target = Target(model, x_rep, num_chains, n, plate_name, sites, observed,
                    tuple(model_args), model_kwargs, guide, supports, replay)
    if guide is not None:
        tr_g = _trace(guide, x_rep, model_args, model_kwargs, "guide", num_chains)
        guide_latents = {s["name"] for s in _sample_sites(tr_g) if not s["is_observed"]}
        missing = [s.name for s in sites if s.name not in guide_latents]
        if missing:
            raise ValueError(
                f"the guide misses the latent site(s) {missing}: a guide must sample every latent "
                "site of the model, under the same name"
            )
        extra = sorted(guide_latents - {s.name for s in sites})
        if extra:
            raise ValueError(f"the guide samples site(s) {extra} that are not latent in the model")
    return target
