"""The PyTorch iteration model (lintloop.analysis.iteration): events, order, renaming, guards."""

import textwrap

import libcst as cst

from lintloop.analysis import FileContext


def _context(source: str) -> FileContext:
    return FileContext(cst.parse_module(textwrap.dedent(source)))


def _loop(ctx: FileContext, header: str):
    return next(loop for loop in ctx.nodes(cst.For) if ctx.snippet(loop).startswith(header))


def _kinds(iteration) -> list[tuple[str, str | None]]:
    return [(e.kind, e.argument if e.kind in ("scaler_step", "unscale") else e.target) for e in iteration.events]


def test_events_through_same_file_functions_in_the_callers_names():
    ctx = _context("""
        import torch
        def train_one_epoch(model, loader, opt, scaler):
            model.train()
            for x, y in loader:
                opt.zero_grad(set_to_none=True)
                scaler.scale(model(x).sum()).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()

        net = build()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        grad_scaler = torch.amp.GradScaler("cuda")
        for epoch in range(3):
            train_loader.sampler.set_epoch(epoch)
            train_one_epoch(net, train_loader, optimizer, grad_scaler)
            net.eval()
    """)
    epoch = ctx.iteration.of(_loop(ctx, "for epoch"))
    assert _kinds(epoch) == [
        ("set_epoch", "train_loader.sampler"), ("train_mode", "net"), ("iterate", "train_loader"),
        ("zero_grad", "optimizer"), ("backward", None), ("unscale", "optimizer"), ("clip", None),
        ("scaler_step", "optimizer"), ("scaler_update", "grad_scaler"), ("eval_mode", "net")]
    backward = epoch.of("backward")[0]
    assert backward.scaled_by == "grad_scaler" and len(backward.loops) == 1 and len(backward.path) == 1
    assert [it.loop for it in ctx.iteration.training_loops] == [_loop(ctx, "for x, y"), _loop(ctx, "for epoch")]


def test_roles_come_from_constructors_before_names():
    ctx = _context("""
        import torch
        from torch.optim.lr_scheduler import StepLR
        warmup = StepLR(opt, 10)
        helper = torch.optim.Adam(params)
        for batch in loader:
            helper.step()
            warmup.step()
            env.step(action)
    """)
    events = ctx.iteration.of(_loop(ctx, "for batch")).events
    assert [(e.kind, e.target) for e in events] == [("step", "helper"), ("scheduler_step", "warmup")]


def test_closure_of_step_runs_before_the_step_and_branches_are_exclusive():
    ctx = _context("""
        import torch
        def closure():
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss
        for i in range(10):
            optimizer.step(closure)
            if phase == "train":
                model.train()
            else:
                model.eval()
    """)
    iteration = ctx.iteration.of(_loop(ctx, "for i"))
    assert [e.kind for e in iteration.events] == ["zero_grad", "loss", "backward", "step", "train_mode", "eval_mode"]
    train, evaluation = iteration.of("train_mode", "eval_mode")
    assert train.is_exclusive_with(evaluation) and not train.is_exclusive_with(iteration.of("step")[0])


def test_paths_that_leave_the_iteration():
    ctx = _context("""
        import torch
        def reset(opt):
            opt.zero_grad()
            return None
        for x, y in loader:
            loss = criterion(model(x), y)
            try:
                loss.backward()
            except RuntimeError:
                optimizer.zero_grad()
                continue
            if not torch.isfinite(loss):
                reset(optimizer)
                break
            reset(optimizer)
            optimizer.step()
    """)
    iteration = ctx.iteration.of(_loop(ctx, "for x, y"))
    handler, guarded, plain = iteration.of("zero_grad")
    assert [ctx.iteration.ends_iteration(e, iteration) for e in (handler, guarded, plain)] == [True, True, False]
    assert handler.is_exclusive_with(iteration.of("backward")[0])


def test_a_recursive_function_is_walked_once():
    ctx = _context("""
        def train(model, depth):
            model.zero_grad()
            train(model, depth - 1)
        for epoch in range(2):
            train(net, 3)
    """)
    assert _kinds(ctx.iteration.of(_loop(ctx, "for epoch"))) == [("zero_grad", "net")]


def test_forward_passes_of_known_modules_and_losses():
    ctx = _context("""
        import torch
        import torch.nn.functional as F
        model = torch.nn.Linear(4, 1)
        for x, y in loader:
            out = model(x)
            loss = F.mse_loss(out, y)
            helper(x)
    """)
    events = ctx.iteration.of(_loop(ctx, "for x, y")).events
    assert [(e.kind, e.target) for e in events] == [("forward", "model"), ("loss", None)]
