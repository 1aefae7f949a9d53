"""Which convolutions of a model the custom kernels compute, and `convert`, which swaps them.

`convert(model, example_input)` replaces, in place, each eligible `torch.nn.Conv2d` (3x3, stride
1, padding 1, dilation 1, grouped, no bias, FP32, zero padding, one input shape) with a
`GroupConv2d` that shares its weight Parameter, so the state dict keeps its keys and values.
By default only where the launch tables say a custom kernel is faster than PyTorch for the
layer's geometry (the dispatch table, else the nearest measured geometry's choice or the
autotune cache, as `dispatch` decides); a layer the tables give to PyTorch stays a Conv2d.
It returns one record per Conv2d: replaced or kept, and why. torch is imported inside the
functions, so this module imports without it.
"""
from __future__ import annotations

from typing import Callable

from .shapes import Shape


def _pair_text(value) -> str:
    if isinstance(value, str):
        return repr(value)
    return str(value[0]) if len(set(value)) == 1 else str(tuple(value))


def conv_skip_reason(conv, fused: bool = False) -> str | None:
    """None if the atlas's kernels compute exactly this Conv2d, else every reason they do not.
    `fused`: the conv heads a chain fused into one layer, whose bias the fused call adds."""
    import torch

    reasons = []
    if type(conv) is not torch.nn.Conv2d:
        reasons.append(f"{type(conv).__name__}, a Conv2d subclass whose forward may differ")
    if tuple(conv.kernel_size) != (3, 3):
        reasons.append(f"kernel {conv.kernel_size[0]}x{conv.kernel_size[1]}")
    if tuple(conv.stride) != (1, 1):
        reasons.append(f"stride {_pair_text(conv.stride)}")
    if isinstance(conv.padding, str) or tuple(conv.padding) != (1, 1):
        reasons.append(f"padding {_pair_text(conv.padding)}")
    if tuple(conv.dilation) != (1, 1):
        reasons.append(f"dilation {_pair_text(conv.dilation)}")
    if conv.groups == 1:
        reasons.append("groups 1 (dense)")
    if conv.bias is not None and not fused:
        reasons.append("has bias")
    if conv.padding_mode != "zeros":
        reasons.append(f"padding_mode {conv.padding_mode}")
    if conv.weight.dtype != torch.float32:
        reasons.append(f"dtype {str(conv.weight.dtype).removeprefix('torch.')}")
    return "; ".join(reasons) or None


def conv_input_shapes(model, example_input, convs) -> dict[int, list[tuple[int, ...]]]:
    """Input shape of every call to each conv in one forward pass, keyed by id(conv)."""
    import torch

    seen: dict[int, list[tuple[int, ...]]] = {}
    hooks = [conv.register_forward_pre_hook(
        lambda module, args: seen.setdefault(id(module), []).append(tuple(args[0].shape)))
        for conv in {id(c): c for c in convs}.values()]
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _set_submodule(model, name: str, module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


# The activation modules a fused layer applies, by exact type, as epilogues.ACTIVATIONS names them.
def _activation_name(module) -> tuple[bool, str | None]:
    """(True, name) for an activation module the kernels fuse (name None: nn.Identity, nothing to
    apply), else (False, None)."""
    import torch

    names = {torch.nn.ReLU: "relu", torch.nn.ReLU6: "relu6", torch.nn.SiLU: "silu",
             torch.nn.Hardswish: "hardswish", torch.nn.Identity: None}
    if type(module) in names:
        return True, names[type(module)]
    return False, None


def fusable_chains(model) -> dict[int, dict]:
    """Conv2d -> BatchNorm2d -> activation chains of `model` in inference, keyed by id(conv):
    consecutive children of one nn.Sequential (torchvision's Conv2dNormActivation is one), the
    BatchNorm with running statistics and the activation optional; timm's BatchNormAct2d (a
    BatchNorm with its activation inside and no dropout) counts as both. Each value: the parent
    Sequential, the names of the children fused after the conv, the BatchNorm and the
    activation's name."""
    import torch

    chains: dict[int, dict] = {}
    for parent in model.modules():
        if not isinstance(parent, torch.nn.Sequential):
            continue
        children = list(parent.named_children())
        for i, (_, conv) in enumerate(children):
            if type(conv) is not torch.nn.Conv2d:
                continue
            after, bn, activation = [], None, None
            rest = children[i + 1:i + 3]
            if rest and type(rest[0][1]) is torch.nn.BatchNorm2d \
                    and rest[0][1].track_running_stats:
                bn = rest[0][1]
                after.append(rest[0][0])
                rest = rest[1:]
            elif rest and type(rest[0][1]).__name__ == "BatchNormAct2d" \
                    and rest[0][1].track_running_stats:
                fusable, name = _activation_name(getattr(rest[0][1], "act", None))
                if fusable and isinstance(getattr(rest[0][1], "drop", None), torch.nn.Identity):
                    bn, activation = rest[0][1], name
                    after.append(rest[0][0])
                rest = []
            if rest:
                fusable, name = _activation_name(rest[0][1])
                if fusable and name is not None:
                    activation = name
                    after.append(rest[0][0])
            if after:
                chains[id(conv)] = {"parent": parent, "after": after, "bn": bn,
                                    "activation": activation}
    return chains


def substitute_convs(model, example_input, choose: Callable[[Shape], tuple[str | None, str]],
                     make_module: Callable, describe: Callable | None = None,
                     chains: dict[int, dict] | None = None,
                     describe_fused: Callable | None = None) -> list[dict]:
    """Replace, in place, each eligible Conv2d of `model` with make_module(conv, kernel), the
    kernel from choose(runtime shape) -> (kernel or None, reason); shapes come from one forward
    pass on `example_input`. Every other layer stays. Returns one record per Conv2d (each name
    under which it is reachable): layer, conv, input_shape, replaced, kernel, reason, and where
    `describe(shape, kernel)` is given, the launch the replacement makes (entry, origin).
    `chains` (fusable_chains): a conv heading one is replaced by make_module(conv, kernel,
    chain) and the children fused after it by nn.Identity; its record says what was fused and,
    with `describe_fused(shape)`, what the fused call runs."""
    import torch

    chains = chains or {}

    convs = [(name, m) for name, m in model.named_modules(remove_duplicate=False)
             if isinstance(m, torch.nn.Conv2d)]
    shapes_seen = conv_input_shapes(model, example_input, [m for _, m in convs])
    made: dict[int, object] = {}  # one replacement per conv object, even if reachable twice
    records = []
    for name, conv in convs:
        shapes = shapes_seen.get(id(conv), [])
        record = {"layer": name, "conv": repr(conv),
                  "input_shape": list(shapes[0]) if shapes else None,
                  "replaced": False, "kernel": None, "reason": None}
        chain, fused_run = chains.get(id(conv)), None
        if chain is not None and describe_fused is not None and shapes and name \
                and len(set(shapes)) == 1 and len(shapes[0]) == 4 \
                and conv_skip_reason(conv, fused=True) is None:
            n, c_in, h, w = shapes[0]
            fused_run = describe_fused(Shape(id=name, source=f"runtime input of {name}", n=n,
                                             c_in=c_in, c_out=conv.out_channels, h=h, w=w,
                                             groups=conv.groups))
            if not fused_run["in_kernel"]:
                # No kernel fuses this geometry's epilogue: the BatchNorm and activation stay
                # modules, which a compiler fuses into one pass of its own, where PyTorch's ops
                # inside the fused call would be two.
                chain = None
        reason = conv_skip_reason(conv, fused=chain is not None)
        if reason is None and not name:
            reason = "the model itself: there is no parent to put a replacement in"
        if reason is None and not shapes:
            reason = "not reached by the example input"
        if reason is None and len(set(shapes)) > 1:
            reason = f"called with {len(set(shapes))} different input shapes"
        if reason is None and len(shapes[0]) != 4:
            reason = f"unbatched input of shape {shapes[0]}: the kernels take NCHW"
        if reason is None:
            n, c_in, h, w = shapes[0]
            shape = Shape(id=name, source=f"runtime input of {name}", n=n, c_in=c_in,
                          c_out=conv.out_channels, h=h, w=w, groups=conv.groups)
            kernel, why = choose(shape)
            if kernel is None:
                reason = why
        if reason is not None:
            record["reason"] = reason
        else:
            if id(conv) not in made:
                made[id(conv)] = make_module(conv, kernel, chain) if chain else \
                    make_module(conv, kernel)
            _set_submodule(model, name, made[id(conv)])
            record.update(replaced=True, kernel=kernel, reason=why)
            if chain:
                for child in chain["after"]:
                    setattr(chain["parent"], child, torch.nn.Identity())
                record["fused"] = {"batchnorm": chain["bn"] is not None,
                                   "activation": chain["activation"]}
                if fused_run is not None:
                    record["fused"].update(fused_run)
            elif chains.get(id(conv)) is not None:
                record["fused"] = None
                record["fuse_note"] = ("not fused: no kernel with fused entries takes this "
                                       "geometry")
            if describe is not None:
                record["launch"] = describe(shape, kernel)
        records.append(record)
    return records


def convert(model, example_input, implementation: str = "dispatch",
            only_faster: bool = True, fuse: bool = False) -> list[dict]:
    """Swap `model`'s eligible Conv2d layers for GroupConv2d in place (see the module's
    docstring); `implementation` is what the new layers call. With `only_faster` (the default)
    and `dispatch`, a layer whose geometry the launch tables give to PyTorch (in the example
    input's layout: pass a channels_last input for a channels_last model) stays a Conv2d.
    `fuse=True` on a model in eval mode: each swapped conv that heads a Conv2d -> BatchNorm2d ->
    activation chain (fusable_chains) becomes one fused layer (GroupConv2d.from_conv_bn: the
    BatchNorm folded into its weight and a bias, the activation applied before the kernel's
    store where the kernel has fused entries), the BatchNorm and activation replaced by
    nn.Identity. In train mode nothing is fused (folding uses the running statistics, which
    training updates and does not normalise with) and the records say so.
    Returns one record per Conv2d: layer, input_shape, replaced, kernel (what dispatch resolves
    to), reason, and for a fused layer `fused` (batchnorm, activation, where the epilogue runs)."""
    from .conv import call_layout, implementations, runtime, support
    from .layers import GroupConv2d
    from .kernels import BASELINES, DISPATCH

    # The layers see the example input's layout (a channels_last model passes channels_last
    # tensors on): dispatch's choice is the one for that layout.
    layout = call_layout(example_input) or "nchw"

    if implementation not in implementations():
        from .conv import UnsupportedConv

        raise UnsupportedConv(f"implementation: unknown {implementation!r}; known: "
                              f"{', '.join(implementations())}")

    def choose(shape: Shape) -> tuple[str | None, str]:
        ok, why = support(implementation, *shape.geometry)
        if not ok:
            return None, why
        if implementation != DISPATCH:
            return implementation, f"named {implementation}"
        impl, _, why = runtime().choice_for(DISPATCH, shape, layout)
        if only_faster and impl in BASELINES:
            return None, f"kept: PyTorch ({impl}) is the faster choice here ({why})"
        return impl, f"dispatch runs {impl} here ({why})"

    def make(conv, kernel, chain=None):
        if chain is None:
            return GroupConv2d.from_conv(conv, implementation)
        return GroupConv2d.from_conv_bn(conv, chain["bn"], chain["activation"], implementation)

    def describe_fused(shape: Shape) -> dict:
        from .kernels import KERNELS

        impl, _, why = runtime().fused_choice(implementation, shape, layout)
        where = (f"in {impl}'s registers, before its store" if impl in KERNELS
                 and KERNELS[impl].epilogues else "not fused: no kernel with fused entries "
                 "takes this geometry")
        in_kernel = impl in KERNELS and KERNELS[impl].epilogues
        return {"runs": impl, "epilogue": where, "why": why, "in_kernel": in_kernel}

    chains = fusable_chains(model) if fuse and not model.training else {}
    records = substitute_convs(model, example_input, choose, make, chains=chains,
                               describe_fused=describe_fused)
    if fuse and model.training:
        for record in records:
            record["fused"] = None
            record["fuse_note"] = ("not fused: the model is in train mode, where BatchNorm "
                                   "normalises with batch statistics; call model.eval() first")
    return records
