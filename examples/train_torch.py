"""Train a small ordinal classifier (star ratings 0-4) on tabular features with PyTorch."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 5


def make_loaders(batch_size):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 20, generator=g)
    y = (x[:, :5].sum(dim=1) * 0.8 + 2).round().clamp(0, NUM_CLASSES - 1).long()
    train = TensorDataset(x[:1600], y[:1600])
    val = TensorDataset(x[1600:], y[1600:])
    return DataLoader(train, batch_size=batch_size, shuffle=True), DataLoader(val, batch_size=256)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--ordinal-weight", type=float, default=0.1)
    args = parser.parse_args(argv)

    train_loader, val_loader = make_loaders(args.batch_size)
    model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, NUM_CLASSES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    criterion = nn.CrossEntropyLoss()
    ordinal_criterion = nn.L1Loss()

    for epoch in range(args.epochs):
        model.train()
        running_loss = 0.0
        for xb, yb in train_loader:
            optimizer.zero_grad()
            logits = model(xb)
            # penalise predictions that are far from the true rating
            predicted_rating = logits.argmax(dim=1).float()
            loss = criterion(logits, yb) + args.ordinal_weight * ordinal_criterion(predicted_rating, yb.float())
            loss.backward()
            optimizer.step()
            running_loss += loss

        model.eval()
        val_loss, correct = 0.0, 0
        with torch.no_grad():
            for xb, yb in val_loader:
                logits = model(xb)
                val_loss += criterion(logits, yb).item() * len(yb)
                correct += (logits.argmax(dim=1) == yb).sum().item()
        n_val = len(val_loader.dataset)
        print(f"epoch {epoch}: train loss {running_loss.item() / len(train_loader):.4f} "
              f"val loss {val_loss / n_val:.4f} val acc {correct / n_val:.3f}")

    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ordinal.pt")


if __name__ == "__main__":
    main()
